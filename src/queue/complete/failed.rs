//! The other ends of an attempt: FAILED (shaped like READY), a retry later, a release on
//! shutdown, and the record of a lost claim. Each is fenced on the attempt's claim.

use diesel_async::AsyncConnection;

use super::retry::{FirstTry, retry_transient};
use crate::db::{self, DbPool};
use crate::domain::event::Event;
use crate::domain::failure::FailureCode;
use crate::domain::job::{JobKind, MAX_ATTEMPTS, Outcome};
use crate::domain::media::MediaError;
use crate::domain::recording::RecordingState;
use crate::domain::split::Fallback;
use crate::queue::error::{end, fenced, lock_owner, video_gone};
use crate::queue::{Claim, JobError};

/// How long a retried job waits before it can be claimed again (5 s).
pub const RETRY_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// FAILED, in one transaction shaped like [`super::ready::finalize_ready`]: the error on the
/// video, `video.failed`, the fenced COMPLETED update last, tried again like it. The video,
/// its event and the attempt get the code and its public message only; the detail (tool and
/// scratch paths, stderr) is the log's.
#[tracing::instrument(skip_all, fields(job_id = claim.job_id, video_id = %claim.video, run = claim.run, attempt = claim.attempt))]
pub async fn finalize_failed(
    pool: &DbPool,
    claim: &Claim,
    error: &MediaError,
) -> Result<(), JobError> {
    let first = finalize_failed_once(pool, claim, error).await;
    retry_transient(
        pool,
        claim,
        Outcome::Failed,
        FirstTry::Answered(first),
        || finalize_failed_once(pool, claim, error),
    )
    .await
}

async fn finalize_failed_once(
    pool: &DbPool,
    claim: &Claim,
    error: &MediaError,
) -> Result<(), JobError> {
    if let Some((head, _)) = claim.part_of {
        return finalize_part_failed_once(pool, claim, error, head).await;
    }
    let message = error.public_message();
    let mut conn = pool.get().await?;
    let tx = db::pipelined::PipelinedTx::new(&mut conn);
    let c = tx.conn();
    // One round trip, like the READY finalize of an upload.
    let event = Event::video_failed(
        claim.video,
        claim.run,
        chrono::Utc::now(), // replaced by the video's updated_at (insert_stamped)
        error.code.as_str(),
        &message,
    );
    let ended = end(Outcome::Failed, Some((error.code.as_str(), &message)));
    tx.run(async {
        let (_, _, _, _, _, completed) = futures_util::try_join!(
            lock_owner(c, claim.video),
            async {
                db::videos::set_failed(c, claim.video, error.code.as_str(), &message)
                    .await
                    .map_err(video_gone)
            },
            async {
                db::recordings::videos::follow_video(c, claim.video, RecordingState::Failed)
                    .await
                    .map_err(JobError::from)
            },
            async {
                db::deliveries::outbox::insert_stamped(c, &event)
                    .await
                    .map_err(JobError::from)
            },
            async {
                // A stitch that fails for good leaves its parts to nobody.
                match claim.kind {
                    JobKind::Stitch => super::parts::owe_parts(c, claim.video, claim.run).await,
                    _ => Ok(()),
                }
            },
            async {
                db::jobs::complete(c, claim.job_id, claim.token, ended)
                    .await
                    .map_err(JobError::from)
            },
        )?;
        fenced(completed)
    })
    .await
}

/// A part that fails its video: the video FAILED with one `video.failed` as for any job, and
/// in the same transaction, under the head's lock, every other open job of the video (its
/// head, the other parts) closed, so the stitch never runs and a part still encoding finds
/// its claim gone. A second part failing later finds its own fence gone and writes nothing.
async fn finalize_part_failed_once(
    pool: &DbPool,
    claim: &Claim,
    error: &MediaError,
    head: i64,
) -> Result<(), JobError> {
    let message = error.public_message();
    let mut conn = pool.get().await?;
    conn.transaction::<_, JobError, _>(async |conn| {
        lock_owner(conn, claim.video).await?;
        db::videos::set_failed(conn, claim.video, error.code.as_str(), &message)
            .await
            .map_err(video_gone)?;
        db::jobs::parts::lock_head(conn, head)
            .await?
            .ok_or(JobError::ClaimLost)?;
        let ended = end(Outcome::Failed, Some((error.code.as_str(), &message)));
        fenced(db::jobs::complete(&*conn, claim.job_id, claim.token, ended).await?)?;
        db::jobs::parts::close_family(conn, head, db::jobs::parts::Closed::VideoFailed).await?;
        super::parts::owe_parts(conn, claim.video, claim.run).await?;
        let event = Event::video_failed(
            claim.video,
            claim.run,
            chrono::Utc::now(), // replaced by the video's updated_at (insert_stamped)
            error.code.as_str(),
            &message,
        );
        db::deliveries::outbox::insert_stamped(&*conn, &event).await?;
        Ok(())
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
    let ends_the_video = error.is_permanent() || claim.attempt >= MAX_ATTEMPTS;
    if ends_the_video && claim.part_of.is_some() && error.code != FailureCode::OriginalMissing {
        // A part's failure is not the video's: the whole encode may well succeed where a
        // chunk's seek or a part's decode did not (I12). Only a missing original, which the
        // whole encode would meet too, fails the video from a part.
        let detail = format!("{}: {}", error.code.as_str(), error.message);
        return super::parts::encode_whole_instead(pool, claim, Fallback::PartFailed, &detail)
            .await
            .map(|()| false);
    }
    if ends_the_video {
        return finalize_failed(pool, claim, error).await.map(|()| false);
    }
    let message = error.public_message();
    let mut conn = pool.get().await?;
    conn.transaction::<_, JobError, _>(async |conn| {
        let ended = end(Outcome::Retry, Some((error.code.as_str(), &message)));
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

/// Records that this node lost its claim (best effort; the next claim also logs it).
pub async fn record_lost(pool: &DbPool, claim: &Claim, reason: &str) -> Result<(), JobError> {
    let mut conn = pool.get().await?;
    db::attempts::log_lost(&mut conn, claim.job_id, claim.token, "claim_lost", reason).await?;
    Ok(())
}
