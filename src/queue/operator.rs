//! An operator's retry or cancel of a job (`vidq jobs`, the dashboard): one transaction
//! each, locks in the usual order, the job's change a compare-and-set on the status it was
//! seen in.

use diesel_async::AsyncConnection;

use super::JobError;
use super::error::lock_owner;
use crate::db::{self, DbError, DbPool};
use crate::domain::event::Event;
use crate::domain::failure::FailureCode;
use crate::domain::ids::VideoId;
use crate::domain::job::JobStatus;
use crate::domain::recording::RecordingState;
use crate::domain::video::VideoStatus;

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
    /// The job is a part of a split video: retry and cancel act on the whole video.
    #[error("job {id} is a part of a split video; retry or cancel its video's job {head}")]
    PartOfVideo {
        /// The part's job id.
        id: i64,
        /// The video's own job.
        head: i64,
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
    /// `vidq jobs retry`: a DEAD job, or the job of a FAILED video, back to PENDING as a new
    /// run with a fresh attempt budget; its video goes back to `queued`. The new run writes
    /// under its own keys; the worker that makes it READY deletes the earlier runs' objects.
    Retry,
    /// `vidq jobs cancel`: a PENDING or PROCESSING job is closed and its video FAILED
    /// (`cancelled`) with one `video.failed`. A worker running it loses its claim at its next
    /// heartbeat and kills its FFmpeg.
    Cancel,
}

/// Applies an operator's retry or cancel in one transaction, locks in the usual order, the
/// job's change a compare-and-set on the status it was seen in.
pub async fn apply(pool: &DbPool, id: i64, action: OperatorAction) -> Result<(), OperatorError> {
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
        db::videos::lock_for_update(conn, video).await?;
        // A live recording's row follows its video below: locked now, before the job (lock
        // order).
        db::recordings::videos::lock_recording_of(conn, video).await?;
        let (status, run, parent) = db::jobs::lock_status(conn, id)
            .await?
            .ok_or(OperatorError::NotFound(id))?;
        if let Some(head) = parent {
            return Err(OperatorError::PartOfVideo { id, head });
        }
        let status: JobStatus = status
            .parse()
            .map_err(|e| JobError::from(DbError::from(e)))?;
        let video_status = job.video_status;
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
                db::videos::requeue(conn, video).await?;
                db::recordings::videos::follow_video(conn, video, RecordingState::Ended).await?;
                // A split video starts over whole: a new run plans its parts anew.
                db::jobs::parts::delete_parts(conn, id).await?;
                let changed = db::jobs::requeue(conn, id, status.as_str()).await?;
                db::jobs::notify_claimable(conn).await?;
                changed
            }
            OperatorAction::Cancel => {
                if !matches!(status, JobStatus::Pending | JobStatus::Processing) {
                    return Err(wrong("only a PENDING or PROCESSING job can be cancelled"));
                }
                let code = FailureCode::Cancelled.as_str();
                let message = FailureCode::Cancelled.sentence();
                let at = db::videos::set_failed(conn, video, code, message).await?;
                db::recordings::videos::follow_video(conn, video, RecordingState::Failed).await?;
                let event = Event::video_failed(video, run, at, code, message);
                db::deliveries::outbox::insert(conn, owner, &event).await?;
                let changed = db::jobs::cancel(conn, id, status.as_str()).await?;
                // A split video's parts stop with it, and their objects go (for a video that
                // was never split the prefix is empty: one listing, on a rare command).
                db::jobs::parts::close_family(conn, id, db::jobs::parts::Closed::Cancelled).await?;
                crate::queue::complete::parts::owe_parts(conn, video, run).await?;
                changed
            }
        };
        if changed == 0 {
            return Err(JobError::ClaimLost.into());
        }
        Ok(())
    })
    .await
}
