//! The files an HLS encoder PUTs into a live recording (and the RTMP listener's own FFmpeg
//! child, which PUTs the same way): each spooled whole and fsynced, then registered in the
//! recording's file ledger for this node's sweeper; a playlist is read for durations and the
//! end; an init segment is read for its video track first.
//!
//! Encoders do not send a refused file again, so a short database outage must not refuse
//! one: every statement here waits for the database for up to `VIDQ_LIVE_DB_PATIENCE_SECS`
//! (the encoder waits for its answer meanwhile, its file kept in the spool). Only past that
//! is a file answered 503 and counted lost: `vidq_live_files_lost_total`, an ERROR line
//! naming the recording and the file, and the recording's `segments.lost` once the database
//! answers again.

use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use sha2::Digest as _;

use super::ingest::BodyError;
use super::live::MAX_FILE_BYTES;
use super::{AppContext, AppError};
use crate::adapters::spool::AppendEnd;
use crate::app::{LiveFileError, ReceiveError, UploadError};
use crate::db::{self, DbError, retrying::while_unavailable_for};
use crate::domain::api_key::hash_presented_key;
use crate::domain::ids::RecordingId;
use crate::domain::init_segment::NoVideo;
use crate::domain::recording::{self, EndReason, FileAxis, FileState, IngestName};
use crate::sync::Locked;

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
    let ingest = ctx
        .ingest
        .as_ref()
        .ok_or(AppError::Receive(ReceiveError::IngestDisabled))?;
    let kind = recording::classify(name).map_err(LiveFileError::BadIngestName)?;
    if length.is_some_and(|n| n > MAX_FILE_BYTES) {
        return Err(AppError::Receive(ReceiveError::PastUploadLength {
            length: MAX_FILE_BYTES,
        }));
    }
    // The stream key first: a wrong key is refused before a byte of its body is read or
    // written. The ingest listener reads a body to its end even after the encoder has shut its
    // side (FFmpeg does at once), so nothing is cut short while the key is looked up.
    let recording = recording_of(ctx, ingest, stream_key, name).await?;
    if recording.node_id != ingest.node_id {
        return Err(AppError::Receive(ReceiveError::WrongNode {
            node: recording.node_id,
        }));
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
            playlist_arrived(ctx, ingest, recording.id, name, &text).await
        }
        Received::File(size, sha256) => {
            let file = ArrivedFile {
                recording: recording.id,
                kind,
                size,
                sha256,
            };
            file_arrived(ctx, ingest, file, name, &mut guard).await
        }
    }
}

/// A playlist the encoder PUT, read into the recording.
async fn playlist_arrived(
    ctx: &AppContext,
    ingest: &super::ingest::Ingest,
    recording: RecordingId,
    name: &str,
    text: &str,
) -> Result<Ingested, AppError> {
    take_playlist(ctx, ingest, recording, text)
        .await
        .map_err(|e| match e {
            // Not a media file: the encoder's next playlist says as much and more.
            Waited::Gone(error) => {
                tracing::warn!(recording_id = %recording, file = name, error = %crate::telemetry::error_chain(&error),
                    "a live playlist could not be read in: the database did not answer");
                AppError::Database(error)
            }
            Waited::App(error) => error,
        })
}

/// An init or segment spooled whole: checked (an init must hold video), kept in the
/// recording, or counted lost when the database stayed away past the patience.
async fn file_arrived(
    ctx: &AppContext,
    ingest: &super::ingest::Ingest,
    file: ArrivedFile,
    name: &str,
    guard: &mut IncomingFile,
) -> Result<Ingested, AppError> {
    let recording = file.recording;
    if file.kind == IngestName::Init {
        refuse_without_video(ctx, ingest, recording, &guard.path).await?;
    }
    match keep_file(ctx, ingest, file, guard).await {
        Err(Waited::Gone(error)) => {
            if error.is_unavailable() {
                count_lost_later(ctx, recording);
            }
            Err(lost(Some(recording), name, error))
        }
        Err(Waited::App(error)) => Err(error),
        Ok(done) => Ok(done),
    }
}

/// The recording a stream key feeds. While the database is away, a key this node looked up
/// lately is taken from memory (the encoder sends a file every few seconds with the same
/// key), so the file's body is spooled meanwhile and only its row waits; an unknown key
/// waits for the database up to the patience.
async fn recording_of(
    ctx: &AppContext,
    ingest: &super::ingest::Ingest,
    stream_key: &str,
    name: &str,
) -> Result<db::recordings::RecordingRow, AppError> {
    let hash = hash_presented_key(stream_key);
    let lookup = || async {
        let mut conn = ctx.db.get().await?;
        Ok::<_, DbError>(db::recordings::by_stream_key(&mut conn, &hash).await?)
    };
    let found = match lookup().await {
        Err(error) if error.is_unavailable() => match ingest.live_keys.recall(&hash) {
            Some(known) => {
                tracing::warn!(recording_id = %known.id, file = name,
                    "the database is unavailable; taking the file for a recording this node knows");
                return Ok(known);
            }
            None => {
                let what = "looking up a live file's stream key";
                while_unavailable_for(ingest.db_patience, what, lookup).await
            }
        },
        found => found,
    };
    match found {
        Ok(Some(recording)) => {
            ingest.live_keys.remember(&hash, &recording);
            Ok(recording)
        }
        Ok(None) => Err(AppError::NotFound),
        Err(error) => Err(lost(None, name, error)),
    }
}

/// A playlist the encoder PUT: the recording's listed segments, and its end if it says so.
async fn take_playlist(
    ctx: &AppContext,
    ingest: &super::ingest::Ingest,
    id: RecordingId,
    text: &str,
) -> Result<Ingested, Waited> {
    let playlist = recording::parse_playlist(text);
    let grace = ingest.live_grace.as_secs_f64();
    let ended = while_unavailable_for(ingest.db_patience, "recording a live playlist", || async {
        let mut conn = ctx.db.get().await?;
        db::recordings::touch(&mut conn, id).await?;
        db::recordings::set_playlist(&mut conn, id, &playlist).await?;
        if !playlist.ended {
            return Ok(0);
        }
        let last = playlist.segments.iter().map(|(n, _)| *n as i32).max();
        Ok(db::recordings::end(&mut conn, id, EndReason::Endlist, last, grace).await?)
    })
    .await
    .map_err(Waited::Gone)?;
    if ended == 1 {
        tracing::info!(recording_id = %id, "live recording ended by its playlist");
    }
    Ok(Ingested::Playlist {
        ended: playlist.ended,
    })
}

/// Why a live file's statements did not finish.
enum Waited {
    /// The database stayed away past the patience (or failed otherwise): the file is lost.
    Gone(DbError),
    /// Anything else (the spool, a landed file): answered as usual.
    App(AppError),
}

impl From<AppError> for Waited {
    fn from(error: AppError) -> Self {
        Self::App(error)
    }
}

/// A file that arrived but could not be recorded: counted, logged at ERROR with what it was,
/// and answered as the database's absence (503, or the error it was).
fn lost(recording: Option<RecordingId>, name: &str, error: DbError) -> AppError {
    if error.is_unavailable() {
        crate::metrics::LIVE_FILES_LOST.inc();
        tracing::error!(recording_id = ?recording, file = name, error = %crate::telemetry::error_chain(&error),
            "a live file is lost: the database did not answer within VIDQ_LIVE_DB_PATIENCE_SECS, and its encoder will not send it again");
    }
    AppError::Database(error)
}

/// Adds one to the recording's `lost_files` once the database answers (for up to ten
/// minutes; a process that stops first leaves the count short, never the log line).
fn count_lost_later(ctx: &AppContext, recording: RecordingId) {
    let db = ctx.db.clone();
    tokio::spawn(async move {
        let counted =
            while_unavailable_for(COUNT_LOST_PATIENCE, "counting a lost live file", || async {
                let mut conn = db.get().await?;
                Ok(db::recordings::add_lost_file(&mut conn, recording).await?)
            })
            .await;
        if let Err(error) = counted {
            tracing::error!(recording_id = %recording, error = %crate::telemetry::error_chain(&error),
                "could not count a lost live file on its recording");
        }
    });
}

/// How long a lost file's count waits for the database.
const COUNT_LOST_PATIENCE: Duration = Duration::from_secs(600);

/// Reads an arrived init segment; one without a video track vidq decodes is refused, its
/// recording failed at once (`no_video_stream`), so nothing waits for an encode that must
/// fail.
async fn refuse_without_video(
    ctx: &AppContext,
    ingest: &super::ingest::Ingest,
    id: RecordingId,
    incoming: &str,
) -> Result<(), AppError> {
    use tokio::io::AsyncReadExt as _;
    // An init segment is a few KiB; past this much, whatever the file is, it is read no
    // further (and then does not parse as an init).
    const MOST: u64 = 4 * 1024 * 1024;
    let file = tokio::fs::File::open(ingest.spool.path().join(incoming))
        .await
        .map_err(|e| AppError::Receive(ReceiveError::Spool(e.into())))?;
    let mut bytes = Vec::new();
    file.take(MOST)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| AppError::Receive(ReceiveError::Spool(e.into())))?;
    let why = match crate::domain::init_segment::video_codec(&bytes) {
        Ok(_) => return Ok(()),
        // Not parsed: nothing is known of its tracks, so it is kept as any file is (its
        // encode says what it is); only a init that shows no video is refused.
        Err(NoVideo::NotAnInit) => {
            tracing::debug!(recording_id = %id, "an init segment that does not parse as fMP4; kept");
            return Ok(());
        }
        Err(why) => why,
    };
    super::live::fail_without_video(ctx, id, &why.to_string()).await?;
    Err(AppError::LiveFile(LiveFileError::NoVideoStream(why)))
}

/// A whole init or segment, spooled under an incoming name.
struct ArrivedFile {
    recording: RecordingId,
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
) -> Result<Ingested, Waited> {
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
    let row = db::recordings::NewRecordingFile {
        recording: id,
        axis,
        sequence,
        object_key: &key,
        size: size as i64,
        spool_path: &spool_path,
        node: &ingest.node_id,
        sha256: &sha256,
    };
    let recorded = record(ctx, ingest, &row).await?;
    let mut conn = ctx
        .db
        .get()
        .await
        .map_err(|e| AppError::from(DbError::from(e)))?;
    let state = recorded.state;
    keep_only_the_named_file(ingest, &recorded, &spool_path).await;
    tracing::debug!(recording_id = %id, axis = axis.as_str(), sequence, bytes = size, state = state.as_str(), "recording file received");
    if recorded.taken || state == FileState::Excluded {
        return Ok(Ingested::File(state));
    }
    // The row did not take this file: it has landed (final: the same bytes again are
    // acknowledged, other bytes refused, since players may hold the landed ones). Read
    // afresh: the statement's own view may predate a landing that committed while it waited
    // for the row, and would call the row `pending`.
    let now = db::recordings::file_digest(&mut conn, id, axis, sequence)
        .await
        .map_err(AppError::from)?;
    match now {
        Some((FileState::Uploaded, Some(digest))) if digest == sha256 => {
            Ok(Ingested::AlreadyLanded)
        }
        _ => Err(AppError::LiveFile(LiveFileError::FileLanded).into()),
    }
}

/// Records `row` in the ledger, waiting out a database outage up to the patience; past it
/// the file is lost, and its spool copy goes, since nothing names it.
async fn record(
    ctx: &AppContext,
    ingest: &super::ingest::Ingest,
    row: &db::recordings::NewRecordingFile<'_>,
) -> Result<db::recordings::RecordedFile, Waited> {
    let recorded = while_unavailable_for(ingest.db_patience, "recording a live file", || async {
        let mut conn = ctx.db.get().await?;
        db::recordings::touch(&mut conn, row.recording).await?;
        Ok(db::recordings::record_file(&mut conn, row).await?)
    })
    .await;
    let mut recorded = match recorded {
        Ok(recorded) => recorded,
        Err(error) => {
            if let Err(remove) = ingest.spool.remove(row.spool_path).await {
                tracing::warn!(error = %crate::telemetry::error_chain(&remove), "could not remove a lost live file");
            }
            return Err(Waited::Gone(error));
        }
    };
    // A try whose commit was answered by a lost connection, then taken again, finds its own
    // file as the one it replaced: that one is kept.
    if recorded.replaced.as_deref() == Some(row.spool_path) {
        recorded.replaced = None;
    }
    Ok(recorded)
}

/// Keeps exactly the file the row names: this one (`spool_path`) if it took the row, and
/// not the version it replaced; none if it arrived past the cutoff or for a row that is done.
async fn keep_only_the_named_file(
    ingest: &super::ingest::Ingest,
    recorded: &db::recordings::RecordedFile,
    spool_path: &str,
) {
    let unused = if recorded.taken && recorded.state == FileState::Pending {
        recorded.replaced.as_deref()
    } else {
        Some(spool_path)
    };
    if let Some(path) = unused
        && let Err(error) = ingest.spool.remove(path).await
    {
        tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not remove an unused recording file");
    }
    if recorded.state == FileState::Excluded {
        // The recording passed its cutoff while this file arrived: its sweeper may have
        // removed its directory meanwhile, which the rename brought back. Gone again if
        // empty (a directory that still holds a file is left).
        ingest.spool.remove_empty_dir_of(spool_path).await;
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
        let chunk = chunk.map_err(ReceiveError::BodyInterrupted)?;
        if text.len() + chunk.len() > MAX {
            return Err(AppError::Receive(ReceiveError::PastUploadLength {
                length: MAX as u64,
            }));
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
                    failure = Some(AppError::Receive(ReceiveError::PastUploadLength {
                        length: MAX_FILE_BYTES,
                    }));
                    break AppendEnd::Discard;
                }
                if append.write(chunk).await.is_err() {
                    break AppendEnd::Discard;
                }
            }
            Some(Err(error)) => {
                failure = Some(AppError::Receive(ReceiveError::BodyInterrupted(error)));
                break AppendEnd::Discard;
            }
            None if length.is_some_and(|n| n != sent) => {
                failure = Some(AppError::Upload(UploadError::SizeMismatch {
                    declared: length.unwrap_or_default() as i64,
                    actual: sent as i64,
                }));
                break AppendEnd::Discard;
            }
            // No file of a recording is empty; an encoder that sends one has failed.
            None if sent == 0 => {
                failure = Some(AppError::LiveFile(LiveFileError::EmptyFile));
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

/// The recordings of the stream keys this node looked up lately, by key hash: what an
/// ingest request goes on with while the database is away.
#[derive(Clone, Debug, Default)]
pub struct KnownKeys {
    rows: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<Vec<u8>, db::recordings::RecordingRow>>,
    >,
}

/// Keys kept before the memory is emptied and starts again (a few minutes of a busy node).
const KNOWN_KEYS_MAX: usize = 10_000;

impl KnownKeys {
    fn remember(&self, hash: &[u8], row: &db::recordings::RecordingRow) {
        let mut rows = self.rows.locked();
        if rows.len() >= KNOWN_KEYS_MAX && !rows.contains_key(hash) {
            rows.clear();
        }
        rows.insert(hash.to_vec(), row.clone());
    }

    fn recall(&self, hash: &[u8]) -> Option<db::recordings::RecordingRow> {
        let rows = self.rows.locked();
        rows.get(hash).cloned()
    }
}
