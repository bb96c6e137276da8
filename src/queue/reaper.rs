//! The reaper: closes jobs that died in their last attempt (their lease ran out with no
//! attempt left). Any worker runs it on its poll tick; the fence makes two reapers harmless.

use diesel_async::AsyncConnection;

use super::JobError;
use super::error::{fenced, lock_owner, video_gone};
use crate::db::{self, DbPool, jobs::AttemptEnd};
use crate::domain::event::Event;
use crate::domain::failure::FailureCode;
use crate::domain::ids::VideoId;
use crate::domain::job::{JobKind, Outcome};
use crate::domain::recording::RecordingState;

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
                let code = FailureCode::AttemptsExhausted.as_str();
                let message = FailureCode::AttemptsExhausted.sentence();
                let at = db::videos::set_failed(conn, video, code, message)
                    .await
                    .map_err(video_gone)?;
                db::recordings::videos::follow_video(conn, video, RecordingState::Failed).await?;
                // A part that died takes its video with it: its head and the other parts are
                // closed under the head's lock (after the video, by lock order).
                if let Some(head) = job.parent_id {
                    db::jobs::parts::lock_head(conn, head)
                        .await?
                        .ok_or(JobError::ClaimLost)?;
                }
                let event = Event::video_failed(video, job.run, at, code, message);
                db::deliveries::outbox::insert(conn, owner, &event).await?;
                let ended = AttemptEnd {
                    outcome: Outcome::Dead,
                    error: Some((FailureCode::LeaseExpired.as_str(), message)),
                };
                fenced(db::jobs::mark_dead(conn, job.id, job.claim_token, ended).await?)?;
                if let Some(head) = job.parent_id {
                    db::jobs::parts::close_family(conn, head, db::jobs::parts::Closed::VideoFailed)
                        .await?;
                }
                // A split run that dies leaves its parts to nobody: the head's own death
                // (its stitch) or a part's.
                if job.parent_id.is_some() || job.kind == JobKind::Stitch {
                    crate::queue::complete::parts::owe_parts(conn, video, job.run).await?;
                }
                Ok(())
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
