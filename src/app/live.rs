//! Live recordings: creating one (a secret stream key in its ingest URL), whether an RTMP
//! publish may feed one, taking the files an HLS encoder PUTs (each spooled and fsynced, then registered in the recording's file
//! ledger for this node's sweeper; a playlist is read for durations and the end), ending it,
//! and what its status shows.

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use sha2::Digest as _;

use super::ingest::BodyError;
use super::{AppContext, AppError};
use crate::adapters::spool::AppendEnd;
use crate::db::{self, recordings::RecordingRow};
use crate::domain::api_key::{ApiKey, hash_presented_key};
use crate::domain::ids::UserId;
use crate::domain::recording::{self, EndReason, FileAxis, FileState, IngestName, RecordingState};

/// The largest file an encoder may PUT (a segment of a high-bitrate stream, or a playlist).
pub const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// A new recording and its secret.
#[derive(Debug)]
pub struct CreatedRecording {
    /// The row.
    pub row: RecordingRow,
    /// The stream key, shown once (only its hash is stored).
    pub stream_key: String,
}

/// What the status endpoint shows.
#[derive(Debug)]
pub struct RecordingStatus {
    /// The row.
    pub row: RecordingRow,
    /// Its state.
    pub state: RecordingState,
    /// Its files, counted.
    pub counts: db::recordings::FileCounts,
    /// The video it became, once it has one.
    pub video_id: Option<uuid::Uuid>,
}

/// Creates a recording whose files this node will spool.
#[tracing::instrument(skip_all, fields(owner = %owner))]
pub async fn create(ctx: &AppContext, owner: UserId) -> Result<CreatedRecording, AppError> {
    let ingest = ctx.ingest.as_ref().ok_or(AppError::IngestDisabled)?;
    super::open_work::admit(
        &ctx.db,
        owner,
        super::open_work::OpenWork::Recordings,
        ctx.upload.max_open_recordings_per_user,
    )
    .await?;
    let key = ApiKey::generate();
    let id = uuid::Uuid::now_v7();
    let mut conn = ctx.db.get().await?;
    let row = db::recordings::insert(&mut conn, id, owner.0, &key.hash(), &ingest.node_id).await?;
    tracing::info!(recording_id = %id, node = %ingest.node_id, "live recording created");
    Ok(CreatedRecording {
        row,
        stream_key: key.reveal().to_owned(),
    })
}

/// The recording and its counts, for its owner only.
pub async fn status(
    ctx: &AppContext,
    owner: UserId,
    id: uuid::Uuid,
) -> Result<RecordingStatus, AppError> {
    let mut conn = ctx.db.get().await?;
    let row = db::recordings::find_owned(&mut conn, owner.0, id)
        .await?
        .ok_or(AppError::NotFound)?;
    let counts = db::recordings::counts(&mut conn, id).await?;
    let video_id = db::live_videos::video_of(&mut conn, id).await?;
    let state = row.state;
    Ok(RecordingStatus {
        row,
        state,
        counts,
        video_id,
    })
}

/// `POST /v1/live/{id}/end`: the broadcaster says it is over.
pub async fn end(ctx: &AppContext, owner: UserId, id: uuid::Uuid) -> Result<(), AppError> {
    let ingest = ctx.ingest.as_ref().ok_or(AppError::IngestDisabled)?;
    let mut conn = ctx.db.get().await?;
    db::recordings::find_owned(&mut conn, owner.0, id)
        .await?
        .ok_or(AppError::NotFound)?;
    let ended = db::recordings::end(
        &mut conn,
        id,
        EndReason::EndedByClient,
        None,
        ingest.live_grace.as_secs_f64(),
    )
    .await?;
    if ended == 1 {
        tracing::info!(recording_id = %id, "live recording ended by its owner");
    }
    Ok(())
}

/// Why an RTMP publish is refused before any media is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishRefusal {
    /// No recording has this stream key.
    UnknownKey,
    /// The recording is spooled on another node: its encoder must publish there.
    OtherNode(String),
    /// The recording has ended; a stream key serves one recording only.
    Over(RecordingState),
}

/// The recording an RTMP publish with `stream_key` feeds, if it may: one of this node's,
/// still `waiting` or `live`. Checked before the encoder's first media message is read.
pub async fn publishable(
    ctx: &AppContext,
    stream_key: &str,
) -> Result<Result<RecordingRow, PublishRefusal>, AppError> {
    let ingest = ctx.ingest.as_ref().ok_or(AppError::IngestDisabled)?;
    let mut conn = ctx.db.get().await?;
    let Some(recording) =
        db::recordings::by_stream_key(&mut conn, &hash_presented_key(stream_key)).await?
    else {
        return Ok(Err(PublishRefusal::UnknownKey));
    };
    if recording.node_id != ingest.node_id {
        return Ok(Err(PublishRefusal::OtherNode(recording.node_id)));
    }
    let state = recording.state;
    Ok(match state {
        RecordingState::Waiting | RecordingState::Live => Ok(recording),
        over => Err(PublishRefusal::Over(over)),
    })
}

/// Where a recording's next segments go on: the number after the highest one received (0
/// before the first), and the media time its playlists listed so far, in ms.
pub async fn resume_point(ctx: &AppContext, id: uuid::Uuid) -> Result<(u32, u64), AppError> {
    let mut conn = ctx.db.get().await?;
    let (last, listed_ms) = db::recordings::segment_extent(&mut conn, id).await?;
    let next = last.map_or(0, |n| n.max(-1) + 1) as u32;
    Ok((next, listed_ms.max(0) as u64))
}

/// What one PUT did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    /// A file registered with this state.
    File(FileState),
    /// The file had landed already with exactly these bytes: nothing changed.
    AlreadyLanded,
    /// A playlist read (and whether it ended the broadcast).
    Playlist {
        /// It carried `#EXT-X-ENDLIST`.
        ended: bool,
    },
}

/// Takes one file an encoder PUT to `{ingest_url}{name}`. The stream key is the only
/// credential (an encoder cannot always send headers); a wrong one reads as an unknown
/// recording. Files are spooled whole and fsynced before their ledger row.
#[tracing::instrument(skip_all, fields(name = %name))]
pub async fn ingest<S>(
    ctx: &AppContext,
    stream_key: &str,
    name: &str,
    length: Option<u64>,
    mut body: S,
) -> Result<Ingested, AppError>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    let ingest = ctx.ingest.as_ref().ok_or(AppError::IngestDisabled)?;
    let kind = recording::classify(name).map_err(AppError::BadIngestName)?;
    if length.is_some_and(|n| n > MAX_FILE_BYTES) {
        return Err(AppError::PastUploadLength {
            length: MAX_FILE_BYTES,
        });
    }
    // The stream key first: a wrong key is refused before a byte of its body is read or
    // written. The ingest listener reads a body to its end even after the encoder has shut its
    // side (FFmpeg does at once), so nothing is cut short while the key is looked up.
    let recording = {
        let mut conn = ctx.db.get().await?;
        db::recordings::by_stream_key(&mut conn, &hash_presented_key(stream_key))
            .await?
            .ok_or(AppError::NotFound)?
    };
    if recording.node_id != ingest.node_id {
        return Err(AppError::WrongNode {
            node: recording.node_id,
        });
    }
    // A file goes to a name of its own first and is renamed into the recording once whole.
    let incoming = ingest.incoming.new_file();
    // Whatever happens to this request (an error, the client gone and the handler dropped),
    // its incoming file does not stay behind.
    let mut guard = IncomingFile {
        spool: ingest.spool.clone(),
        path: incoming.clone(),
        armed: true,
    };
    // The write takes a slot of the broadcaster's share and of the recording's, so no
    // broadcaster (or anyone holding their key) takes the node's spool from the others.
    let writer = crate::adapters::writer_share::Writer {
        user: recording.owner_id,
        recording: Some(recording.id),
    };
    let received = if kind == IngestName::Playlist {
        read_playlist(&mut body).await.map(Received::Playlist)
    } else {
        spool_whole(ingest, &incoming, length, writer, &mut body)
            .await
            .map(|(size, sha256)| Received::File(size, sha256))
    }?;
    match received {
        Received::Playlist(text) => {
            guard.armed = false; // a playlist is read into memory, never written
            take_playlist(ctx, ingest, recording.id, &text).await
        }
        Received::File(size, sha256) => {
            let file = ArrivedFile {
                recording: recording.id,
                kind,
                size,
                sha256,
            };
            keep_file(ctx, ingest, file, &mut guard).await
        }
    }
}

/// A playlist the encoder PUT: the recording's listed segments, and its end if it says so.
async fn take_playlist(
    ctx: &AppContext,
    ingest: &super::ingest::Ingest,
    id: uuid::Uuid,
    text: &str,
) -> Result<Ingested, AppError> {
    let playlist = recording::parse_playlist(text);
    let mut conn = ctx.db.get().await?;
    db::recordings::touch(&mut conn, id).await?;
    db::recordings::set_playlist(&mut conn, id, &playlist).await?;
    if playlist.ended {
        let last = playlist.segments.iter().map(|(n, _)| *n as i32).max();
        let ended = db::recordings::end(
            &mut conn,
            id,
            EndReason::Endlist,
            last,
            ingest.live_grace.as_secs_f64(),
        )
        .await?;
        if ended == 1 {
            tracing::info!(recording_id = %id, last_segment = ?last, "live recording ended by its playlist");
        }
    }
    Ok(Ingested::Playlist {
        ended: playlist.ended,
    })
}

/// A whole init or segment, spooled under an incoming name.
struct ArrivedFile {
    recording: uuid::Uuid,
    kind: IngestName,
    size: u64,
    sha256: String,
}

/// Renames an arrived file into its recording and records it in the ledger; keeps exactly
/// the file the row names, and says what became of this one.
async fn keep_file(
    ctx: &AppContext,
    ingest: &super::ingest::Ingest,
    file: ArrivedFile,
    guard: &mut IncomingFile,
) -> Result<Ingested, AppError> {
    let ArrivedFile {
        recording: id,
        kind,
        size,
        sha256,
    } = file;
    let (axis, sequence) = match kind {
        IngestName::Init => (FileAxis::Init, 0),
        IngestName::Segment(n) => (FileAxis::Segment, n as i32),
        IngestName::Playlist => unreachable!("handled above"),
    };
    let key = recording::object_key(id, &kind).expect("a file has a key");
    let spool_path =
        recording::spool_path(id, &kind, uuid::Uuid::now_v7()).expect("a file has a spool path");
    // A file sent again (the encoder retried) replaces what an earlier PUT left.
    ingest
        .spool
        .rename(&guard.path, &spool_path)
        .await
        .map_err(super::ingest::spool_error)?;
    guard.armed = false;
    let mut conn = ctx.db.get().await?;
    db::recordings::touch(&mut conn, id).await?;
    let recorded = db::recordings::record_file(
        &mut conn,
        &db::recordings::NewRecordingFile {
            recording: id,
            axis,
            sequence,
            object_key: &key,
            size: size as i64,
            spool_path: &spool_path,
            node: &ingest.node_id,
            sha256: &sha256,
        },
    )
    .await?;
    let state = recorded.state;
    // Keep exactly the file the row names: this one if it took the row (and not the version
    // it replaced), none if it arrived past the cutoff or for a row that is done already.
    let unused = if recorded.taken && state == FileState::Pending {
        recorded.replaced
    } else {
        Some(spool_path.clone())
    };
    if let Some(path) = unused
        && let Err(error) = ingest.spool.remove(&path).await
    {
        tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not remove an unused recording file");
    }
    if state == FileState::Excluded {
        // The recording passed its cutoff while this file arrived: its sweeper may have
        // removed its directory meanwhile, which the rename brought back. Gone again if
        // empty (a directory that still holds a file is left).
        ingest.spool.remove_empty_dir_of(&spool_path).await;
    }
    tracing::debug!(recording_id = %id, axis = axis.as_str(), sequence, bytes = size, state = state.as_str(), "recording file received");
    if recorded.taken || state == FileState::Excluded {
        return Ok(Ingested::File(state));
    }
    // The row did not take this file: it has landed (final: the same bytes again are
    // acknowledged, other bytes refused, since players may hold the landed ones). Read
    // afresh: the statement's own view may predate a landing that committed while it waited
    // for the row, and would call the row `pending`.
    let now = db::recordings::file_digest(&mut conn, id, axis, sequence).await?;
    match now {
        Some((FileState::Uploaded, Some(digest))) if digest == sha256 => {
            Ok(Ingested::AlreadyLanded)
        }
        _ => Err(AppError::FileLanded),
    }
}

/// What a PUT's body became.
enum Received {
    /// A playlist's text.
    Playlist(String),
    /// A file of this many bytes with this SHA-256 (hex), fsynced under its incoming name.
    File(u64, String),
}

/// A playlist's text (small: at most 4 MiB).
async fn read_playlist<S>(body: &mut S) -> Result<String, AppError>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    const MAX: usize = 4 * 1024 * 1024;
    let mut text = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(AppError::BodyInterrupted)?;
        if text.len() + chunk.len() > MAX {
            return Err(AppError::PastUploadLength { length: MAX as u64 });
        }
        text.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// Writes the whole body to `relative` (fsynced); nothing is kept unless it arrived whole
/// (and, with a `Content-Length`, of that length).
async fn spool_whole<S>(
    ingest: &super::ingest::Ingest,
    relative: &str,
    length: Option<u64>,
    writer: crate::adapters::writer_share::Writer,
    body: &mut S,
) -> Result<(u64, String), AppError>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    use super::ingest::spool_error;
    ingest.spool.create(relative).await.map_err(spool_error)?;
    let file = ingest.spool.hold(relative).await.map_err(spool_error)?;
    let mut append = ingest
        .spool
        .append(file, 0, None, writer)
        .map_err(spool_error)?;
    let mut sent = 0u64;
    let mut digest = sha2::Sha256::new();
    let mut failure = None;
    let end = loop {
        match body.next().await {
            Some(Ok(chunk)) => {
                sent += chunk.len() as u64;
                digest.update(&chunk);
                if sent > MAX_FILE_BYTES {
                    failure = Some(AppError::PastUploadLength {
                        length: MAX_FILE_BYTES,
                    });
                    break AppendEnd::Discard;
                }
                if append.write(chunk).await.is_err() {
                    break AppendEnd::Discard;
                }
            }
            Some(Err(error)) => {
                failure = Some(AppError::BodyInterrupted(error));
                break AppendEnd::Discard;
            }
            None if length.is_some_and(|n| n != sent) => {
                failure = Some(AppError::SizeMismatch {
                    declared: length.unwrap_or_default() as i64,
                    actual: sent as i64,
                });
                break AppendEnd::Discard;
            }
            // No file of a recording is empty; an encoder that sends one has failed.
            None if sent == 0 => {
                failure = Some(AppError::EmptyFile);
                break AppendEnd::Discard;
            }
            None => break AppendEnd::Complete,
        }
    };
    let (appended, _file) = append.finish(end).await.map_err(spool_error)?;
    match failure {
        Some(failure) => {
            tracing::info!(error = %failure, bytes = sent, "a recording file did not arrive whole; nothing kept");
            Err(failure)
        }
        None => Ok((appended.kept, hex::encode(digest.finalize()))),
    }
}

/// `playback_url` of a recording: vidq's playlist route with a signed, expiring token
/// (players cannot send headers).
pub fn playback_path(ctx: &AppContext, id: uuid::Uuid) -> String {
    let ttl = chrono::Duration::seconds(ctx.upload.playback_url_ttl_secs as i64);
    let token = ctx
        .playback
        .key
        .sign(crate::domain::ids::VideoId(id), chrono::Utc::now() + ttl);
    format!("/v1/live/{id}/playlist.m3u8?token={token}")
}

/// The live playlist a player reads (docs/live.md): nothing until the init is
/// in S3; then the contiguous run of segments S3 holds, from number 0, each a presigned
/// URL (or a plain one under `VIDQ_PUBLIC_BASE_URL`); `#EXT-X-ENDLIST` once the recording
/// has ended and every segment it keeps is listed.
pub async fn playlist(
    ctx: &AppContext,
    id: uuid::Uuid,
    token: Option<&str>,
) -> Result<String, AppError> {
    ctx.playback.key.verify(
        crate::domain::ids::VideoId(id),
        token.unwrap_or_default(),
        chrono::Utc::now(),
    )?;
    let (recording, files) = {
        let mut conn = ctx.db.get().await?;
        let recording = db::recordings::find(&mut conn, id)
            .await?
            .ok_or(AppError::NotFound)?;
        (recording, db::recordings::files_of(&mut conn, id).await?)
    };
    let state = recording.state;
    let uploaded = FileState::Uploaded;
    let init = files
        .iter()
        .find(|f| f.axis == FileAxis::Init && f.state == uploaded);
    let kept: Vec<&db::recordings::FileView> = files
        .iter()
        .filter(|f| f.axis == FileAxis::Segment && f.state != FileState::Excluded)
        .collect();
    let segments: Vec<recording::LiveSegment> = kept
        .iter()
        .map(|f| recording::LiveSegment {
            sequence: f.sequence as u32,
            duration_ms: f.duration_ms.map(|d| d as u32),
            uploaded: f.state == uploaded,
        })
        .collect();
    // The run starts at the encoder's first segment (FFmpeg's `-start_number`), as its
    // first playlist said; rows from before that was recorded started at 0.
    let first = recording.first_sequence.unwrap_or(0).max(0) as u32;
    let playable = recording::playable_prefix(&segments, first);
    let ttl = std::time::Duration::from_secs(ctx.upload.playback_url_ttl_secs);
    let url = async |key: &str| -> Result<String, AppError> {
        match ctx.playback.public_url(key) {
            Some(url) => Ok(url),
            None => Ok(ctx.storage.presign_get(key, ttl).await?),
        }
    };
    let init_url = match init {
        Some(init) => Some(url(&init.object_key).await?),
        None => None,
    };
    // Past the cutoff nothing more can arrive: the playlist lists every segment S3 holds,
    // across any gap (marked as a discontinuity), and ends once none is still on its way.
    // Before that, only the contiguous run, which a gap may still fill.
    let final_state = matches!(
        state,
        RecordingState::Ended | RecordingState::Ready | RecordingState::Failed
    );
    let mut to_list: Vec<&&db::recordings::FileView> = if final_state {
        kept.iter()
            .filter(|f| f.state == uploaded && f.duration_ms.is_some())
            .collect()
    } else {
        let mut run: Vec<_> = kept.iter().filter(|f| f.sequence >= first as i32).collect();
        run.sort_by_key(|f| f.sequence);
        run.truncate(playable);
        run
    };
    to_list.sort_by_key(|f| f.sequence);
    let mut listed = Vec::with_capacity(to_list.len());
    if init_url.is_some() {
        let mut previous: Option<i32> = None;
        for file in to_list {
            let ms = file.duration_ms.unwrap_or_default() as u32;
            let after_gap = previous.is_some_and(|p| file.sequence != p + 1);
            previous = Some(file.sequence);
            listed.push((ms, url(&file.object_key).await?, after_gap));
        }
    }
    // ENDLIST only once nothing more can be listed: a player stops reloading when it sees
    // it. Past the cutoff (`ended` and after), or ended by the encoder's own ENDLIST with every
    // segment up to the last one it named listed.
    let final_listed = recording
        .final_sequence
        .is_some_and(|last| first as usize + playable == last as usize + 1);
    let still_landing = kept.iter().any(|f| f.state == FileState::Pending);
    let ended = init_url.is_some()
        && if final_state {
            // Past the cutoff (and when it follows its video, `ready` or `failed`): over
            // once every kept segment is in S3, whatever gaps the encoder left.
            !still_landing
        } else {
            recording.end_reason == Some(EndReason::Endlist)
                && final_listed
                && playable == kept.iter().filter(|f| f.sequence >= first as i32).count()
        };
    Ok(recording::render_live_playlist(
        init_url.as_deref(),
        recording.target_duration_secs.map(|n| n as u32),
        &listed,
        ended,
    ))
}

/// Removes a request's incoming file when the request ends without renaming it into its
/// recording (a bad key, a body cut short, the handler dropped with its client).
struct IncomingFile {
    spool: crate::adapters::spool::SpoolRoot,
    path: String,
    armed: bool,
}

impl Drop for IncomingFile {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (spool, path) = (self.spool.clone(), std::mem::take(&mut self.path));
        // Dropping can happen outside a runtime only at process exit; then the file stays.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = spool.remove(&path).await {
                    tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not remove an incoming recording file");
                }
            });
        }
    }
}
