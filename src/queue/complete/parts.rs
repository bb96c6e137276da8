//! The ends of a split video's attempts that READY and FAILED do not cover: the head's plan
//! (its parts enqueued, the head parked as their stitch), a part stored (and, by the last
//! part, the stitch woken), and a part that sends the video to the whole encode (a chunk that
//! failed its checks, a part that failed for good). Each is one transaction fenced on the
//! attempt's claim, like every other end. A stitch that fails its checks needs none of these:
//! its own attempt encodes the video whole (`pipeline::split`).

use diesel_async::AsyncConnection;

use super::retry::{FirstTry, retry_transient};
use crate::db::{self, DbPool};
use crate::domain::failure::FailureCode;
use crate::domain::ids::VideoId;
use crate::domain::job::{JobKind, Outcome};
use crate::domain::keys;
use crate::domain::split::{Fallback, SplitPlan};
use crate::queue::error::{end, fenced, lock_owner};
use crate::queue::{Claim, JobError};

/// Runs the fenced transaction `once`, and again as [`retry_transient`] says (each end here
/// is tried like a finalize).
async fn tried<F, Fut>(
    pool: &DbPool,
    claim: &Claim,
    outcome: Outcome,
    mut once: F,
) -> Result<(), JobError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), JobError>>,
{
    let first = once().await;
    retry_transient(pool, claim, outcome, FirstTry::Answered(first), once).await
}

/// In a transaction that ends a split run without READY (its video failed or cancelled, or
/// sent to the whole encode): forgets the parts' ledger rows and owes the bucket their prefix
/// (`db::doomed_objects`), so nothing of them outlives the run (a sweeper deletes them; one
/// that lands later still is an orphan of a failed video, or superseded by the READY).
pub(crate) async fn owe_parts(
    conn: &diesel_async::AsyncPgConnection,
    video: VideoId,
    run: i32,
) -> Result<(), JobError> {
    let prefix = [keys::parts_prefix(video, run)];
    futures_util::try_join!(
        db::artifacts::forget_parts(conn, video, run),
        db::doomed_objects::owe(conn, &[], &prefix),
    )
    .map(drop)
    .map_err(JobError::from)
}

/// The head's plan: its parts enqueued (the audio, then every chunk) and the head parked as
/// their stitch, in one transaction; the planning attempt is logged as `planned`.
#[tracing::instrument(skip_all, fields(job_id = claim.job_id, video_id = %claim.video, run = claim.run, attempt = claim.attempt))]
pub async fn record_plan(pool: &DbPool, claim: &Claim, plan: &SplitPlan) -> Result<(), JobError> {
    let json = serde_json::to_value(plan).expect("a plan is plain data");
    // The audio first: it is claimed first (ids follow this order) and runs beside the chunks
    // instead of after the last of them.
    let parts: Vec<(JobKind, i32)> = plan
        .audio_part()
        .map(|audio| (JobKind::Audio, audio))
        .into_iter()
        .chain((0..plan.chunks()).map(|n| (JobKind::Chunk, n)))
        .collect();
    let once = || async {
        let mut conn = pool.get().await?;
        conn.transaction::<_, JobError, _>(async |conn| {
            lock_owner(conn, claim.video).await?;
            let planned = end(Outcome::Planned, None);
            fenced(
                db::jobs::parts::plan_parts(
                    conn,
                    claim.job_id,
                    claim.token,
                    &json,
                    &parts,
                    planned,
                )
                .await?,
            )?;
            db::jobs::notify_claimable(conn).await?;
            Ok(())
        })
        .await
    };
    tried(pool, claim, Outcome::Planned, once).await
}

/// A part whose outputs are stored: COMPLETED (fenced, under its head's lock), and if it was
/// the last open part of its run, its head's stitch made claimable in the same transaction.
#[tracing::instrument(skip_all, fields(job_id = claim.job_id, video_id = %claim.video, run = claim.run, attempt = claim.attempt))]
pub async fn record_part_stored(pool: &DbPool, claim: &Claim) -> Result<(), JobError> {
    let Some((head, part)) = claim.part_of else {
        return Err(JobError::ClaimLost);
    };
    let once = || async {
        let mut conn = pool.get().await?;
        conn.transaction::<_, JobError, _>(async |conn| {
            lock_owner(conn, claim.video).await?;
            // The head first: parts completing at once take turns here, and the last one
            // sees every other's completion.
            db::jobs::parts::lock_head(conn, head)
                .await?
                .ok_or(JobError::ClaimLost)?;
            fenced(
                db::jobs::complete(
                    conn,
                    claim.job_id,
                    claim.token,
                    end(Outcome::Completed, None),
                )
                .await?,
            )?;
            if db::jobs::parts::wake_stitch(conn, head).await? > 0 {
                tracing::info!(part, "last part stored; the stitch is claimable");
                db::jobs::notify_claimable(conn).await?;
            }
            Ok(())
        })
        .await
    };
    tried(pool, claim, Outcome::Completed, once).await
}

/// A part that sends its video to the whole encode (`reason`, with `detail` for the log): the
/// part's fenced statement, its siblings deleted (their objects are left to the next READY's
/// clean-up, or to the orphan pass), and the head made an `encode` of the whole video,
/// claimable at once, all in one transaction. Logged and counted by reason.
#[tracing::instrument(skip_all, fields(job_id = claim.job_id, video_id = %claim.video, run = claim.run, attempt = claim.attempt))]
pub async fn encode_whole_instead(
    pool: &DbPool,
    claim: &Claim,
    reason: Fallback,
    detail: &str,
) -> Result<(), JobError> {
    let Some((head, part)) = claim.part_of else {
        return Err(JobError::ClaimLost);
    };
    tracing::error!(part, reason = reason.label(), %detail,
        "a part of the split video failed where the whole encode may not; encoding it whole instead");
    let code = FailureCode::StitchFailed;
    let why = format!("{}: {}", code.as_str(), reason.label());
    let once = || async {
        let mut conn = pool.get().await?;
        conn.transaction::<_, JobError, _>(async |conn| {
            lock_owner(conn, claim.video).await?;
            db::jobs::parts::lock_head(conn, head)
                .await?
                .ok_or(JobError::ClaimLost)?;
            let ended = end(Outcome::Retry, Some((code.as_str(), code.sentence())));
            fenced(db::jobs::complete(&*conn, claim.job_id, claim.token, ended).await?)?;
            if db::jobs::parts::head_to_whole(conn, head, &why).await? == 0 {
                // Cancelled, deleted or sent whole already: nothing more to do, and nothing
                // to undo (the part's own end stands).
                return Ok(false);
            }
            db::jobs::parts::delete_parts(conn, head).await?;
            owe_parts(conn, claim.video, claim.run).await?;
            db::jobs::notify_claimable(conn).await?;
            Ok(true)
        })
        .await
        .map(|went| {
            if went {
                crate::metrics::SPLIT_FALLBACKS
                    .with_label_values(&[reason.label()])
                    .inc();
            }
        })
    };
    tried(pool, claim, Outcome::Retry, once).await
}
