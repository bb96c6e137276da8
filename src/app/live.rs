//! Live recordings: creating one (a secret stream key in its ingest URL), whether an RTMP
//! publish may feed one, taking the files an HLS encoder PUTs (each spooled and fsynced, then registered in the recording's file
//! ledger for this node's sweeper; a playlist is read for durations and the end), ending it,
//! and what its status shows.

use super::{AppContext, AppError};
use crate::app::ReceiveError;
use crate::db::{self, recordings::RecordingRow};
use crate::domain::api_key::{ApiKey, hash_presented_key};
use crate::domain::ids::{RecordingId, UserId, VideoId};
use crate::domain::recording::{self, EndReason, FileAxis, FileState, RecordingState};

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
    pub video_id: Option<VideoId>,
}

pub use super::live_files::{Ingested, ingest};

/// Creates a recording whose files this node will spool.
#[tracing::instrument(skip_all, fields(owner = %owner))]
pub async fn create(ctx: &AppContext, owner: UserId) -> Result<CreatedRecording, AppError> {
    let ingest = ctx
        .ingest
        .as_ref()
        .ok_or(AppError::Receive(ReceiveError::IngestDisabled))?;
    use super::open_work::{self, OpenWork};
    use diesel_async::AsyncConnection as _;
    let key = ApiKey::generate();
    let id = RecordingId::new();
    let cap = ctx.upload.max_open_recordings_per_user;
    let _turn = open_work::turn(owner, OpenWork::Recordings).await;
    let mut conn = ctx.db.get().await?;
    let row = conn
        .transaction::<_, AppError, _>(async |conn| {
            open_work::admit(conn, owner, OpenWork::Recordings, cap).await?;
            let hash = key.hash();
            Ok(db::recordings::insert(conn, id, owner, &hash, &ingest.node_id).await?)
        })
        .await?;
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
    id: RecordingId,
) -> Result<RecordingStatus, AppError> {
    let mut conn = ctx.db.get().await?;
    let row = db::recordings::find_owned(&mut conn, owner, id)
        .await?
        .ok_or(AppError::NotFound)?;
    let counts = db::recordings::counts(&mut conn, id).await?;
    let video_id = db::recordings::videos::video_of(&mut conn, id).await?;
    let state = row.state;
    Ok(RecordingStatus {
        row,
        state,
        counts,
        video_id,
    })
}

/// `POST /v1/live/{id}/end`: the broadcaster says it is over.
pub async fn end(ctx: &AppContext, owner: UserId, id: RecordingId) -> Result<(), AppError> {
    let ingest = ctx
        .ingest
        .as_ref()
        .ok_or(AppError::Receive(ReceiveError::IngestDisabled))?;
    let mut conn = ctx.db.get().await?;
    db::recordings::find_owned(&mut conn, owner, id)
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

/// Fails a recording at once whose broadcast has no video vidq can decode (`why` says what
/// it lacks): its end reason `no_video_stream`, its cutoff now, so nothing more is taken.
pub async fn fail_without_video(
    ctx: &AppContext,
    id: RecordingId,
    why: &str,
) -> Result<(), AppError> {
    let mut conn = ctx.db.get().await?;
    if db::recordings::fail_without_video(&mut conn, id).await? == 1 {
        tracing::warn!(recording_id = %id, reason = why, "live recording failed: no_video_stream");
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
    let ingest = ctx
        .ingest
        .as_ref()
        .ok_or(AppError::Receive(ReceiveError::IngestDisabled))?;
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
pub async fn resume_point(ctx: &AppContext, id: RecordingId) -> Result<(u32, u64), AppError> {
    let mut conn = ctx.db.get().await?;
    let (last, listed_ms) = db::recordings::segment_extent(&mut conn, id).await?;
    let next = last.map_or(0, |n| n.max(-1) + 1) as u32;
    Ok((next, listed_ms.max(0) as u64))
}

/// `playback_url` of a recording: vidq's playlist route with a signed, expiring token
/// (players cannot send headers).
pub fn playback_path(ctx: &AppContext, id: RecordingId) -> String {
    let ttl = chrono::Duration::seconds(ctx.upload.playback_url_ttl_secs as i64);
    let token = ctx.playback.key.sign(id, chrono::Utc::now() + ttl);
    format!("/v1/live/{id}/playlist.m3u8?token={token}")
}

/// The live playlist a player reads (docs/live.md): nothing until the init is
/// in S3; then the contiguous run of segments S3 holds, from number 0, each a presigned
/// URL (or a plain one under `VIDQ_PUBLIC_BASE_URL`); `#EXT-X-ENDLIST` once the recording
/// has ended and every segment it keeps is listed.
pub async fn playlist(
    ctx: &AppContext,
    id: RecordingId,
    token: Option<&str>,
) -> Result<String, AppError> {
    ctx.playback
        .key
        .verify(id, token.unwrap_or_default(), chrono::Utc::now())?;
    let (recording, files) = {
        let mut conn = ctx.db.get().await?;
        let recording = db::recordings::find(&mut conn, id)
            .await?
            .ok_or(AppError::NotFound)?;
        (recording, db::recordings::files_of(&mut conn, id).await?)
    };
    let listing = Listing::of(&recording, &files);
    let ttl = std::time::Duration::from_secs(ctx.upload.playback_url_ttl_secs);
    let url = async |key: &str| -> Result<String, AppError> {
        match ctx.playback.public_url(&ctx.storage.at(key)) {
            Some(url) => Ok(url),
            None => Ok(ctx.storage.presign_get(key, ttl).await?),
        }
    };
    let init_url = match listing.init {
        Some(init) => Some(url(&init.object_key).await?),
        None => None,
    };
    let mut listed = Vec::with_capacity(listing.segments.len());
    if init_url.is_some() {
        let mut previous: Option<i32> = None;
        for file in listing.segments {
            let ms = file.duration_ms.unwrap_or_default() as u32;
            let after_gap = previous.is_some_and(|p| file.sequence != p + 1);
            previous = Some(file.sequence);
            listed.push((ms, url(&file.object_key).await?, after_gap));
        }
    }
    let ended = init_url.is_some() && listing.complete;
    Ok(recording::render_live_playlist(
        init_url.as_deref(),
        recording.target_duration_secs.map(|n| n as u32),
        &listed,
        ended,
    ))
}

/// What a recording's live playlist lists: its init in S3, the segments in order, and
/// whether the list is complete (then it ends, once the init is there).
struct Listing<'a> {
    init: Option<&'a db::recordings::FileView>,
    segments: Vec<&'a db::recordings::FileView>,
    complete: bool,
}

impl<'a> Listing<'a> {
    fn of(recording: &db::recordings::RecordingRow, files: &'a [db::recordings::FileView]) -> Self {
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
        // Past the cutoff nothing more can arrive: the playlist lists every segment S3
        // holds, across any gap (marked as a discontinuity), and ends once none is still on
        // its way. Before that, only the contiguous run, which a gap may still fill.
        let final_state = matches!(
            recording.state,
            RecordingState::Ended | RecordingState::Ready | RecordingState::Failed
        );
        let from_first = || kept.iter().copied().filter(|f| f.sequence >= first as i32);
        let mut to_list: Vec<&db::recordings::FileView> = if final_state {
            kept.iter()
                .copied()
                .filter(|f| f.state == uploaded && f.duration_ms.is_some())
                .collect()
        } else {
            let mut run: Vec<_> = from_first().collect();
            run.sort_by_key(|f| f.sequence);
            run.truncate(playable);
            run
        };
        to_list.sort_by_key(|f| f.sequence);
        // ENDLIST only once nothing more can be listed: a player stops reloading when it
        // sees it. Past the cutoff (`ended` and after, `ready` or `failed` when it follows
        // its video): once every kept segment is in S3, whatever gaps the encoder left.
        // Before: ended by the encoder's own ENDLIST with every segment up to the last one
        // it named listed.
        let complete = if final_state {
            !kept.iter().any(|f| f.state == FileState::Pending)
        } else {
            let final_listed = recording
                .final_sequence
                .is_some_and(|last| first as usize + playable == last as usize + 1);
            recording.end_reason == Some(EndReason::Endlist)
                && final_listed
                && playable == from_first().count()
        };
        Self {
            init,
            segments: to_list,
            complete,
        }
    }
}
