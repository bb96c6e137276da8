//! Trying a fenced finalize again: a conflict gets a few tries, a database out of reach is
//! waited for, and a try after one whose `COMMIT` got no reply asks the job row whether
//! that one committed.

use super::super::JobError;
use super::super::error::{is_transient, unavailable};
use crate::db::{self, DbPool};
use crate::domain::job::Outcome;
use crate::queue::Claim;

/// How many times a finalize transaction is tried when the database fails in a way that
/// passes (a broken connection, a serialization failure, a deadlock). After that the result
/// is left to the lease: the job is reclaimed and encoded again.
const FINALIZE_TRIES: u32 = 4;

/// Wait before the second try; doubled before each further one (100 + 200 + 400 ms in all,
/// well inside a lease).
const FINALIZE_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs the fenced transaction `once` up to [`FINALIZE_TRIES`] times while it fails
/// transiently, and for as long as [`db::retrying::PATIENCE`] while the database is out of
/// reach. Each try is the whole transaction again, fence included, so a try after the
/// lease ran out matches nothing and rolls back like any late result. A try whose COMMIT got
/// no reply may have committed: when the next try then finds the claim gone, the attempt's
/// own row says whether it ended with `outcome`, which is then success.
///
/// `first` is how the first try went: the caller makes that try itself, because a READY
/// finalize's first try may carry statements ahead of it (the freed slots' next claim) or be
/// shared with other finalizes, and the tries after it go alone.
pub(super) async fn retry_transient<F, Fut>(
    pool: &DbPool,
    claim: &Claim,
    outcome: Outcome,
    first: FirstTry,
    mut once: F,
) -> Result<(), JobError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), JobError>>,
{
    let mut backoff = FINALIZE_BACKOFF;
    let started = std::time::Instant::now();
    let mut tries = 1;
    let mut first = Some(first);
    loop {
        let answer = match first.take() {
            Some(FirstTry::Answered(answer)) => answer,
            Some(FirstTry::FailedInBatch) => {
                // The batch's failure is this transaction's first: wait as after any
                // transient failure, and count the next try as a second one.
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                tries += 1;
                once().await
            }
            Some(FirstTry::NotMade) | None => once().await,
        };
        match answer {
            Err(JobError::ClaimLost) if tries > 1 => {
                let mut conn = pool.get().await?;
                return if db::attempts::ended_with(&mut conn, claim.job_id, claim.token, outcome)
                    .await?
                {
                    tracing::info!("an earlier try had committed");
                    Ok(())
                } else {
                    Err(JobError::ClaimLost)
                };
            }
            // A conflict gets a few tries; a database out of reach (a restart, a failover)
            // is waited for, up to the patience of any statement that may run again.
            Err(err)
                if is_transient(&err)
                    && (tries < FINALIZE_TRIES
                        || (unavailable(&err)
                            && started.elapsed() + backoff < db::retrying::PATIENCE)) =>
            {
                tracing::warn!(error = %crate::telemetry::error_chain(&err), tries,
                    "finalize failed on a transient database error; trying again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(2));
                tries += 1;
            }
            result => return result,
        }
    }
}

/// How the first try of a fenced transaction went (see [`retry_transient`]).
pub(super) enum FirstTry {
    /// The caller made it, and this is its answer.
    Answered(Result<(), JobError>),
    /// It was part of a transaction of several finalizes ([`super::ready`]) that failed on
    /// a transient error, so it may have committed.
    FailedInBatch,
    /// None was made yet: the first try is this loop's own (the finalize's transaction,
    /// shared with others, failed without committing).
    NotMade,
}
