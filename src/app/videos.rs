//! Reading and deleting videos, scoped to their owner.

use diesel_async::AsyncConnection;

use super::doomed::Debt;
use super::{AppContext, AppError};
use crate::db::{
    self,
    videos::{VideoRow, VideoWithAttempts},
};
use crate::domain::ids::{UserId, VideoId};
use crate::domain::job::JobStatus;
use crate::domain::keys;
use crate::domain::video::VideoStatus;

/// Largest page `list_videos` returns.
pub const MAX_PAGE: i64 = 100;

/// Where a ready video can be played from (see [`super::playback`]).
#[derive(Clone, Debug)]
pub struct Playback {
    /// The HLS playlist.
    pub hls_url: Option<super::playback::HlsUrl>,
    /// The progressive MP4.
    pub mp4_url: Option<String>,
    /// The thumbnail.
    pub thumbnail_url: Option<String>,
}

/// What the API shows of a video row, kept apart from the row so that a renamed or added
/// column changes this mapping, never the wire.
#[derive(Clone, Debug)]
pub struct VideoFacts {
    /// Video id.
    pub id: uuid::Uuid,
    /// The upload it was made from (`None`: a live recording).
    pub upload_id: Option<uuid::Uuid>,
    /// The live recording it was made from (`None`: an upload).
    pub recording_id: Option<uuid::Uuid>,
    /// Probed duration.
    pub duration_ms: Option<i64>,
    /// Probed width.
    pub width: Option<i32>,
    /// Probed height.
    pub height: Option<i32>,
    /// Stable failure code.
    pub error_code: Option<crate::domain::failure::FailureCode>,
    /// Human-readable failure.
    pub error_message: Option<String>,
    /// Created (the confirm's transaction time).
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// When it became ready.
    pub ready_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl From<VideoRow> for VideoFacts {
    fn from(row: VideoRow) -> Self {
        Self {
            id: row.id.0,
            upload_id: row.upload_id.map(|u| u.0),
            recording_id: row.recording_id.map(|r| r.0),
            duration_ms: row.duration_ms,
            width: row.width,
            height: row.height,
            error_code: row.error_code,
            error_message: row.error_message,
            created_at: row.created_at,
            ready_at: row.ready_at,
        }
    }
}

/// A video as its owner sees it.
#[derive(Clone, Debug)]
pub struct VideoView {
    /// The video's facts.
    pub video: VideoFacts,
    /// Parsed status.
    pub status: VideoStatus,
    /// Encoding attempts made so far.
    pub attempts: i32,
    /// Present once ready.
    pub playback: Option<Playback>,
    /// A split video's parts done and its parts and stitch in all, while it encodes.
    pub progress: Option<(i64, i64)>,
}

/// Builds the owner's view of a video, with its playback URLs once it is ready.
pub async fn view(
    ctx: &AppContext,
    (video, attempts, job): VideoWithAttempts,
) -> Result<VideoView, AppError> {
    let mut status = video.status;
    let job: Option<JobStatus> = job
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(db::DbError::from)?;
    // Derived: a claimed job makes a queued video `processing` (the claim writes no video row).
    if status == VideoStatus::Queued && job == Some(JobStatus::Processing) {
        status = VideoStatus::Processing;
    }
    let playback = if status == VideoStatus::Ready {
        Some(super::playback::urls(ctx, &video).await?)
    } else {
        None
    };
    // Only a video being encoded can be split and under way; the read is one indexed lookup.
    let progress = if status == VideoStatus::Processing {
        let mut conn = ctx.db.get().await?;
        db::jobs::parts::progress_of(&mut conn, &[video.id])
            .await?
            .first()
            .map(|p| (p.done, p.total))
    } else {
        None
    };
    Ok(VideoView {
        video: video.into(),
        status,
        attempts: attempts.unwrap_or(0),
        playback,
        progress,
    })
}

/// One of the caller's videos.
pub async fn get_video(
    ctx: &AppContext,
    owner: UserId,
    id: VideoId,
) -> Result<VideoView, AppError> {
    let found = {
        let mut conn = ctx.db.get().await?;
        db::videos::find_owned(&mut conn, owner, id).await?
    };
    view(ctx, found.ok_or(AppError::NotFound)?).await
}

/// The video of the holder of `presented_key`, looked up with the key in one statement,
/// which reads that arrive together share ([`super::status_reads`]); `Err(Unauthorized)`
/// for a key nobody holds, `NotFound` for a video that is not theirs.
pub async fn get_video_with_key(
    ctx: &AppContext,
    presented_key: &str,
    id: VideoId,
) -> Result<VideoView, AppError> {
    let hash = crate::domain::api_key::hash_presented_key(presented_key);
    match ctx.status_reads.read(hash, id).await? {
        Some(found) => view(ctx, found).await,
        None => Err(super::auth::explain_miss(&ctx.db, presented_key).await),
    }
}

/// A page of the caller's videos, newest first, and the cursor of the next page.
pub async fn list_videos(
    ctx: &AppContext,
    owner: UserId,
    status: Option<VideoStatus>,
    limit: i64,
    after: Option<VideoId>,
) -> Result<(Vec<VideoView>, Option<VideoId>), AppError> {
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(AppError::BadRequest(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    let mut rows = {
        let mut conn = ctx.db.get().await?;
        // One extra row tells whether another page exists.
        db::videos::list_owned(
            &mut conn,
            owner,
            status.map(VideoStatus::as_str),
            after,
            limit + 1,
        )
        .await?
    };
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = more.then(|| rows.last().map(|(v, _, _)| v.id)).flatten();
    let mut views = Vec::with_capacity(rows.len());
    for row in rows {
        views.push(view(ctx, row).await?);
    }
    Ok((views, next))
}

/// Deletes a video, its job and its upload contract (or its live recording) in one
/// transaction (in the lock order of `db`: users, videos, recordings, jobs; the confirmed
/// contract last, which no path waits for), then its original (or the recording's files)
/// and every output object. A worker still encoding it
/// finds its claim gone and its results fenced out.
#[tracing::instrument(skip_all, fields(owner = %owner, video_id = %id))]
pub async fn delete_video(ctx: &AppContext, owner: UserId, id: VideoId) -> Result<(), AppError> {
    let mut conn = ctx.db.get().await?;
    let owed = conn
        .transaction::<_, AppError, _>(async |conn| {
            if db::users::lock_for_key_share(conn, owner).await?.is_none() {
                return Err(AppError::NotFound);
            }
            let video = db::videos::lock_owned_for_update(conn, owner, id)
                .await?
                .ok_or(AppError::NotFound)?;
            // A recording goes with its video (after the video, before its job: lock order;
            // left behind it would be made into a video again). Deleting it cascades to the
            // video and its job.
            if let Some(recording) = video.recording_id {
                db::recordings::delete(conn, recording).await?;
            }
            db::jobs::lock_for_videos(conn, &[id]).await?;
            db::videos::delete(conn, id).await?;
            let mut debt = Debt::of(Vec::new(), &[id]);
            match (video.upload_id, video.recording_id) {
                (Some(upload), _) => {
                    db::uploads::delete(conn, upload).await?;
                    debt.keys.push(keys::original(upload));
                }
                (None, Some(recording)) => debt
                    .prefixes
                    .push(crate::domain::recording::files_prefix(recording)),
                (None, None) => {}
            }
            // The bucket's debt commits with the rows' deletion.
            Ok(debt.owe(conn).await?)
        })
        .await?;
    drop(conn);
    // The objects go in a task of their own: an S3 that does not answer must not hold the
    // client for the calls' whole timeouts. Past the budget the deletion goes on unwatched;
    // whatever S3 refuses stays listed for a sweeper.
    let (storage, pool) = (ctx.storage.clone(), ctx.db.clone());
    let objects = tokio::spawn(async move { super::doomed::pay(&storage, &pool, owed).await });
    if tokio::time::timeout(OBJECT_DELETION_BUDGET, objects)
        .await
        .is_err()
    {
        tracing::warn!(budget = ?OBJECT_DELETION_BUDGET,
            "video deleted; its objects are still being deleted in the background");
    } else {
        tracing::info!("video deleted");
    }
    Ok(())
}

/// How long `DELETE /v1/videos/{id}` waits for the video's objects to be deleted before it
/// answers; the rows are already gone, so the answer does not depend on it.
pub const OBJECT_DELETION_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);
