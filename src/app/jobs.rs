//! The transactions of an encoding job's life after its claim: finalize READY or FAILED,
//! retry later, release on shutdown, reap a job that died in its last attempt, and the
//! operators' retry and cancel. Every write that depends on a claim is fenced on its token;
//! a fence that matches nothing rolls the whole transaction back.

use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::json;
use uuid::Uuid;

use crate::db::{self, DbError, DbPool, jobs::AttemptEnd};
use crate::domain::event::Event;
use crate::domain::ids::VideoId;
use crate::domain::job::{JobStatus, MAX_ATTEMPTS, Outcome};
use crate::domain::media::MediaError;
use crate::domain::video::VideoStatus;
use crate::pipeline::AttemptOutput;

/// How long a retried job waits before it can be claimed again (the seed's 5 s).
pub const RETRY_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// A worker's hold on a job.
#[derive(Clone, Debug)]
pub struct Claim {
    /// Job id.
    pub job_id: i64,
    /// Its video.
    pub video: VideoId,
    /// The fencing token.
    pub token: Uuid,
    /// This attempt's number.
    pub attempt: i32,
    /// Where the original is.
    pub original_key: String,
}

impl From<db::jobs::ClaimedJob> for Claim {
    fn from(job: db::jobs::ClaimedJob) -> Self {
        Self {
            job_id: job.id,
            video: VideoId(job.video_id),
            token: job.claim_token,
            attempt: job.attempt_count,
            original_key: job.original_s3_key,
        }
    }
}

/// Why a claim-dependent transaction changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The claim is no longer ours (lease expired and reclaimed, cancelled, video deleted):
    /// the transaction was rolled back whole.
    #[error("the claim was lost; nothing was written")]
    ClaimLost,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

impl From<diesel::result::Error> for JobError {
    fn from(err: diesel::result::Error) -> Self {
        Self::Database(DbError::Query(err))
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for JobError {
    fn from(err: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        Self::Database(DbError::Pool(err))
    }
}

/// Takes the uploader's lock (`FOR KEY SHARE`: it blocks the user's deletion but not the
/// user's other finalizations), the first lock of every path. `ClaimLost` if the video or its
/// owner is gone.
async fn lock_owner(conn: &mut AsyncPgConnection, video: VideoId) -> Result<Uuid, JobError> {
    db::users::lock_owner_of_video(conn, video.0)
        .await?
        .ok_or(JobError::ClaimLost)
}

/// Fails with [`JobError::ClaimLost`] (rolling back) when the fence matched nothing.
fn fenced(rows: usize) -> Result<(), JobError> {
    if rows == 0 {
        Err(JobError::ClaimLost)
    } else {
        Ok(())
    }
}

/// A video row that vanished under a finalize (deleted with its video) is a lost claim.
fn video_gone(err: diesel::result::Error) -> JobError {
    match err {
        diesel::result::Error::NotFound => JobError::ClaimLost,
        other => other.into(),
    }
}

fn end(outcome: Outcome, error: Option<&MediaError>) -> AttemptEnd<'_> {
    AttemptEnd {
        outcome,
        error: error.map(|e| (e.code, e.message.as_str())),
    }
}

/// READY, in one transaction: lock the uploader, update (and so lock) the video with its
/// facts and live keys, insert `video.ready`, and as the LAST statement the fenced COMPLETED
/// update (which also closes the attempt). A fence that matches nothing rolls it all back.
#[tracing::instrument(skip_all, fields(job_id = claim.job_id, video_id = %claim.video, attempt = claim.attempt))]
pub async fn finalize_ready(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
) -> Result<(), JobError> {
    let mut conn = pool.get().await?;
    conn.transaction::<_, JobError, _>(async |conn| {
        let owner = lock_owner(conn, claim.video).await?;
        let media = &output.media;
        let facts = db::videos::ReadyFacts {
            duration_ms: media.duration_ms,
            width: media.width,
            height: media.height,
            video_codec: &media.video_codec,
            audio_codec: media.audio_codec.as_deref(),
            live_attempt: claim.attempt,
            hls_key: &output.keys.hls,
            mp4_key: &output.keys.mp4,
            thumbnail_key: &output.keys.thumbnail,
        };
        let at = db::videos::set_ready(conn, claim.video.0, &facts)
            .await
            .map_err(video_gone)?;
        let data = json!({
            "status": VideoStatus::Ready.as_str(),
            "duration_ms": media.duration_ms,
            "width": media.width,
            "height": media.height,
            "playback": {
                "hls_key": output.keys.hls,
                "mp4_key": output.keys.mp4,
                "thumbnail_key": output.keys.thumbnail,
            },
        });
        db::outbox::insert(conn, owner, &Event::video_ready(claim.video, at, data)).await?;
        fenced(
            db::jobs::complete(
                conn,
                claim.job_id,
                claim.token,
                end(Outcome::Completed, None),
            )
            .await?,
        )
    })
    .await
}

/// FAILED, in one transaction shaped like [`finalize_ready`]: the error on the video,
/// `video.failed`, the fenced COMPLETED update last.
#[tracing::instrument(skip_all, fields(job_id = claim.job_id, video_id = %claim.video, attempt = claim.attempt))]
pub async fn finalize_failed(
    pool: &DbPool,
    claim: &Claim,
    error: &MediaError,
) -> Result<(), JobError> {
    let mut conn = pool.get().await?;
    conn.transaction::<_, JobError, _>(async |conn| {
        let owner = lock_owner(conn, claim.video).await?;
        let at = db::videos::set_failed(conn, claim.video.0, error.code, &error.message)
            .await
            .map_err(video_gone)?;
        let event = Event::video_failed(claim.video, at, error.code, &error.message);
        db::outbox::insert(conn, owner, &event).await?;
        fenced(
            db::jobs::complete(
                conn,
                claim.job_id,
                claim.token,
                end(Outcome::Failed, Some(error)),
            )
            .await?,
        )
    })
    .await
}

/// A failed attempt: permanent errors and the last attempt's error fail the video; otherwise
/// the job goes back to PENDING after `delay` (fenced). Returns whether it will be retried.
pub async fn fail_or_retry(
    pool: &DbPool,
    claim: &Claim,
    error: &MediaError,
    delay: std::time::Duration,
) -> Result<bool, JobError> {
    if error.is_permanent() || claim.attempt >= MAX_ATTEMPTS {
        return finalize_failed(pool, claim, error).await.map(|()| false);
    }
    let mut conn = pool.get().await?;
    conn.transaction::<_, JobError, _>(async |conn| {
        let ended = end(Outcome::Retry, Some(error));
        fenced(
            db::jobs::retry_later(conn, claim.job_id, claim.token, ended, delay.as_secs_f64())
                .await?,
        )?;
        db::jobs::notify_claimable(conn).await?;
        Ok(true)
    })
    .await
}

/// Graceful release on shutdown: back to PENDING with the attempt given back (fenced).
pub async fn release(pool: &DbPool, claim: &Claim) -> Result<(), JobError> {
    let mut conn = pool.get().await?;
    conn.transaction::<_, JobError, _>(async |conn| {
        fenced(
            db::jobs::release(
                conn,
                claim.job_id,
                claim.token,
                end(Outcome::Released, None),
            )
            .await?,
        )?;
        db::jobs::notify_claimable(conn).await?;
        Ok(())
    })
    .await
}

/// Records that this node lost its claim (best effort; the next claim also closes it).
pub async fn record_lost(pool: &DbPool, claim: &Claim, reason: &str) -> Result<(), JobError> {
    let mut conn = pool.get().await?;
    db::attempts::finish(
        &mut conn,
        claim.token,
        Outcome::Lost,
        Some(("claim_lost", reason)),
    )
    .await?;
    Ok(())
}

/// Closes jobs that died in their last attempt: DEAD (closed), the video FAILED and one
/// `video.failed`, in one transaction each. Any worker runs this on its tick; the fence
/// makes two reapers harmless. Returns how many it closed.
pub async fn reap_dead(pool: &DbPool) -> Result<usize, JobError> {
    let mut conn = pool.get().await?;
    let candidates = db::jobs::dead_candidates(&mut conn, 16).await?;
    let mut reaped = 0;
    for job in candidates {
        let closed = conn
            .transaction::<_, JobError, _>(async |conn| {
                let video = VideoId(job.video_id);
                let owner = lock_owner(conn, video).await?;
                let (code, message) = (
                    "attempts_exhausted",
                    "every encoding attempt stopped without finishing",
                );
                let at = db::videos::set_failed(conn, video.0, code, message)
                    .await
                    .map_err(video_gone)?;
                db::outbox::insert(conn, owner, &Event::video_failed(video, at, code, message))
                    .await?;
                let ended = AttemptEnd {
                    outcome: Outcome::Dead,
                    error: Some(("lease_expired", message)),
                };
                fenced(db::jobs::mark_dead(conn, job.id, job.claim_token, ended).await?)
            })
            .await;
        match closed {
            Ok(()) => {
                reaped += 1;
                tracing::warn!(job_id = job.id, video_id = %job.video_id, "job died in its last attempt; video failed");
            }
            Err(JobError::ClaimLost) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(reaped)
}

/// Why an operator's retry or cancel was refused.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// No such job.
    #[error("no job {0}")]
    NotFound(i64),
    /// The job is in a state the command does not apply to.
    #[error("job {id} is {status} (video {video_status}); {hint}")]
    WrongState {
        /// Job id.
        id: i64,
        /// Its status.
        status: JobStatus,
        /// Its video's status.
        video_status: VideoStatus,
        /// What the command needs.
        hint: &'static str,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] JobError),
}

impl From<diesel::result::Error> for OperatorError {
    fn from(err: diesel::result::Error) -> Self {
        Self::Database(err.into())
    }
}

/// What an operator asks of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperatorAction {
    /// `vidq jobs retry`: a DEAD job, or the job of a FAILED video, back to PENDING with a
    /// fresh attempt budget; its video goes back to `queued`.
    Retry,
    /// `vidq jobs cancel`: a PENDING or PROCESSING job is closed and its video FAILED
    /// (`cancelled`) with one `video.failed`. A worker running it loses its claim at its next
    /// heartbeat and kills its FFmpeg.
    Cancel,
}

/// Applies an operator's retry or cancel in one transaction, locks in the usual order, the
/// job's change a compare-and-set on the status it was seen in.
pub async fn operator(pool: &DbPool, id: i64, action: OperatorAction) -> Result<(), OperatorError> {
    let mut conn = pool.get().await.map_err(JobError::from)?;
    conn.transaction::<_, OperatorError, _>(async |conn| {
        let job = db::jobs::find(conn, id)
            .await?
            .ok_or(OperatorError::NotFound(id))?;
        let video = VideoId(job.video_id);
        let owner = match lock_owner(conn, video).await {
            Ok(owner) => owner,
            Err(JobError::ClaimLost) => return Err(OperatorError::NotFound(id)),
            Err(err) => return Err(err.into()),
        };
        db::videos::lock_for_update(conn, video.0).await?;
        let status: JobStatus = db::jobs::lock_status(conn, id)
            .await?
            .ok_or(OperatorError::NotFound(id))?
            .parse()
            .map_err(|e| JobError::from(DbError::from(e)))?;
        let video_status: VideoStatus = job
            .video_status
            .parse()
            .map_err(|e| JobError::from(DbError::from(e)))?;
        let wrong = |hint| OperatorError::WrongState {
            id,
            status,
            video_status,
            hint,
        };
        let changed = match action {
            OperatorAction::Retry => {
                let retryable = status == JobStatus::Dead
                    || (status == JobStatus::Completed && video_status == VideoStatus::Failed);
                if !retryable {
                    return Err(wrong(
                        "only a DEAD job or the job of a failed video can be retried",
                    ));
                }
                db::videos::requeue(conn, video.0).await?;
                let changed = db::jobs::requeue(conn, id, status.as_str()).await?;
                db::jobs::notify_claimable(conn).await?;
                changed
            }
            OperatorAction::Cancel => {
                if !matches!(status, JobStatus::Pending | JobStatus::Processing) {
                    return Err(wrong("only a PENDING or PROCESSING job can be cancelled"));
                }
                let (code, message) = ("cancelled", "an operator cancelled the encoding");
                let at = db::videos::set_failed(conn, video.0, code, message).await?;
                db::outbox::insert(conn, owner, &Event::video_failed(video, at, code, message))
                    .await?;
                db::jobs::cancel(conn, id, status.as_str()).await?
            }
        };
        if changed == 0 {
            return Err(JobError::ClaimLost.into());
        }
        Ok(())
    })
    .await
}
