//! A READY finalize with the freed slot's next claim sent AHEAD of its transaction, in the
//! same flight: the slot hears its next job as soon as the claim answers and goes on while
//! the finalize commits on a task of its own.

use tracing::Instrument;

use super::failed::release;
use super::ready::{finalize_ready_once, ready_statements};
use super::retry::{FirstTry, retry_transient};
use crate::db::{self, DbPool};
use crate::domain::job::{JobKind, Outcome};
use crate::pipeline::AttemptOutput;
use crate::queue::{CarriedClaim, Claim, ClaimAnswer, JobError, NextClaim};

/// A READY finalize that the claim of its slot's next job went ahead of
/// ([`claim_ahead_of_finalize_ready`]).
pub struct ClaimedAhead {
    /// The claim's answer (`None` if it got none: no connection could be had, or the task
    /// ended first).
    pub claimed: CarriedClaim,
    /// The finalize with all its tries, on a task of its own.
    pub finalized: tokio::task::JoinHandle<Result<(), JobError>>,
}

/// [`finalize_ready`], with `next`'s claim of the freed slot's next job sent AHEAD of the
/// transaction in the same flight, and answered as soon as the claim is: the slot starts its
/// next job while the finalize's statements run and its `COMMIT` waits for the WAL flush,
/// instead of after. The finalize goes on (all its tries) on a task of its own, whose answer
/// is [`ClaimedAhead::finalized`].
pub async fn claim_ahead_of_finalize_ready(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    node: &str,
    lease: std::time::Duration,
) -> ClaimedAhead {
    let (answer, claimed) = tokio::sync::oneshot::channel();
    let (pool, claim, output, node) =
        (pool.clone(), claim.clone(), output.clone(), node.to_owned());
    let finalized = tokio::spawn(
        async move {
            let next = NextClaim { node: &node, lease };
            finalize_ready_claiming_ahead(&pool, &claim, &output, next, answer).await
        }
        .in_current_span(),
    );
    ClaimedAhead {
        claimed: claimed.await.ok(),
        finalized,
    }
}

/// [`finalize_ready`] (all its tries), its first try with `next`'s claim sent ahead of the
/// transaction in the same flight and answered on `answer` as soon as it is. `answer` is
/// dropped unanswered when no claim went out.
///
/// The claim is the plain autocommitted claim statement, unchanged, and the finalize's
/// transaction is the same as without it (the COMPLETED update last, a fence that matches
/// nothing rolls it all back); only their order on the wire changes. The claim does not depend
/// on the finalize: it takes a job whether or not the fence holds, as a claim behind the
/// `COMMIT` does. A recording's video, whose finalize takes two round trips, sends its claim
/// behind the `COMMIT`, and `answer` hears once the transaction has ended.
pub async fn finalize_ready_claiming_ahead(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    next: NextClaim<'_>,
    answer: ClaimAnswer,
) -> Result<(), JobError> {
    let first = if claim.kind == JobKind::Repackage {
        let (first, claimed) = finalize_ready_once(pool, claim, output, Some(next)).await;
        if let Some(claimed) = claimed {
            hand_over(pool, answer, claimed).await;
        }
        first
    } else {
        let (first, orphan) =
            finalize_ready_once_claiming_ahead(pool, claim, output, next, answer).await;
        if let Some(orphan) = orphan {
            release_orphan(pool, &orphan).await;
        }
        first
    };
    retry_transient(
        pool,
        claim,
        Outcome::Completed,
        FirstTry::Answered(first),
        || async { finalize_ready_once(pool, claim, output, None).await.0 },
    )
    .await
}

/// Answers a claim sent ahead; a job claimed for a slot that is no longer listening (its task
/// ended at shutdown) is handed back at once rather than left to its lease.
async fn hand_over(pool: &DbPool, answer: ClaimAnswer, claimed: Result<Option<Claim>, JobError>) {
    if let Err(Ok(Some(orphan))) = answer.send(claimed) {
        release_orphan(pool, &orphan).await;
    }
}

/// Hands back a job claimed for a slot that is gone.
pub(super) async fn release_orphan(pool: &DbPool, orphan: &Claim) {
    if let Err(error) = release(pool, orphan).await {
        tracing::warn!(job_id = orphan.job_id,
            error = %crate::telemetry::error_chain(&error),
            "could not hand back a job claimed for a slot that is gone; its lease will expire");
    }
}

/// `next`'s claim, answered on `answer` as soon as it is, and behind it the whole READY
/// transaction of `claim` (not a recording), all sent in one flight. Returns the
/// transaction's answer, and the job claimed if nobody was listening for it any more.
async fn finalize_ready_once_claiming_ahead(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    next: NextClaim<'_>,
    answer: ClaimAnswer,
) -> (Result<(), JobError>, Option<Claim>) {
    // Without a connection no claim went out: `answer` is dropped unanswered.
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(error) => return (Err(error.into()), None),
    };
    let tx = db::pipelined::PipelinedTx::new(&mut conn);
    let c = tx.conn();
    // Polled first, so sent first: the claim is on the wire before the BEGIN.
    let claimed = async {
        let claimed = next.one(c).await;
        answer
            .send(claimed)
            .err()
            .and_then(|unheard| unheard.ok().flatten())
    };
    let (orphan, finalized) =
        futures_util::future::join(claimed, tx.run(ready_statements(c, claim, output))).await;
    (finalized, orphan)
}
