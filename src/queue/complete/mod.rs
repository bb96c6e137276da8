//! How an attempt's end is recorded: the single entry is [`Completer`], which every end goes
//! through (READY, FAILED, retry later, release, lost). A READY finalize goes one of two
//! ways, chosen here and nowhere else, and both end in [`ready::finalize_ready_all`], which
//! builds the READY transaction ([`ready::transaction`]):
//!
//! - **inline**: a worker with one slot sends its finalize itself;
//! - **batched**: with several slots, finalizes go through [`COMMITTERS`] committer tasks; a
//!   finalize that arrives while both are committing waits, and the first one free takes
//!   everything waiting ([`crate::batching`]) into one transaction.
//!
//! Either way, the freed slots' next claims ([`crate::queue::claim_ahead`]) ride ahead of the
//! transaction in the same flight: this module puts them there and hands back the jobs
//! claimed for slots that stopped listening; the transaction does not know they are there.
//!
//! The other ends ([`failed`]) go alone. Nothing waits for a batch to fill: a finalize on a
//! quiet worker goes alone and at once. Batches grow only while the database is slower than
//! the slots, which is when sharing a commit, a WAL flush and a round trip pays.

pub mod failed;
pub mod parts;
pub mod ready;
mod retry;

pub use failed::{RETRY_DELAY, fail_or_retry, finalize_failed, record_lost, release};
pub use ready::{
    ReadyAttempt, finalize_ready, finalize_ready_after_failed_batch, finalize_ready_all,
};

use crate::batching::{Groups, Unanswered, Waiting};
use crate::db::DbPool;
use crate::domain::media::MediaError;
use crate::pipeline::Handed;
use crate::queue::claim_ahead::{Orphans, Rider, Riders};
use crate::queue::{Claim, JobError, NextClaim};

/// Batches in flight at once. One committer leaves all of a worker's finalizes to one
/// backend, which runs their statements one after another on one core while the others
/// wait: two let the next batch form and go while one commits.
const COMMITTERS: usize = 2;

/// A finalize waiting for a committer: the attempt, and its slot's rider if it asked for
/// its next job.
type Queued = (ReadyAttempt, Option<Rider>);

/// Where one worker process records its attempts' ends. Cloning shares it.
#[derive(Clone)]
pub struct Completer {
    /// The worker's pool.
    pool: DbPool,
    /// Who claims the slots' next jobs.
    node: std::sync::Arc<str>,
    /// The next claims' lease.
    lease: std::time::Duration,
    /// With several slots, the committers' queue.
    committers: Option<Groups<Queued, Result<(), JobError>>>,
}

impl Completer {
    /// The completion path of a worker whose slots claim as `next`; with more than one of
    /// its `slots` it starts the committers on the current runtime, which end once every
    /// clone is dropped.
    pub fn start(pool: DbPool, next: NextClaim<'_>, slots: u32) -> Self {
        let (node, lease): (std::sync::Arc<str>, _) = (next.node.into(), next.lease);
        let slots = usize::try_from(slots).unwrap_or(usize::MAX);
        // Each slot has at most one finalize waiting, so the queue never makes one wait.
        let committers = (slots > 1).then(|| {
            let (pool, node) = (pool.clone(), node.clone());
            Groups::start(COMMITTERS, slots, slots, move |batch| {
                let (pool, node) = (pool.clone(), node.clone());
                async move { commit(&pool, batch, NextClaim { node: &node, lease }).await }
            })
        });
        Self {
            pool,
            node,
            lease,
            committers,
        }
    }

    /// Finalizes `attempt` READY, with `rider`'s claim of the slot's next job ahead of the
    /// transaction in the same flight (the slot hears it on its `NextJob` as soon as it
    /// answers, while this still runs). Returns once the finalize has its answer.
    pub async fn finalize_ready(
        &self,
        attempt: ReadyAttempt,
        rider: Option<Rider>,
    ) -> Result<(), JobError> {
        let Some(committers) = &self.committers else {
            return self.finalize_here(vec![(attempt, rider)]).await.remove(0);
        };
        let (claim, output) = (attempt.claim.clone(), attempt.output.clone());
        match committers.submit((attempt, rider)).await {
            Ok(finalized) => finalized,
            // The committers have ended (they only do when every clone is gone, or if they
            // panicked): nothing was sent, so this is a first try.
            Err(Unanswered::NotTaken(waiting)) => self.finalize_here(vec![waiting]).await.remove(0),
            // The committer died with this finalize taken, perhaps committed.
            Err(Unanswered::Lost) => {
                finalize_ready_after_failed_batch(&self.pool, &claim, &output).await
            }
        }
    }

    /// Finalizes `batch` on this task, its riders' claims ahead of it.
    async fn finalize_here(&self, batch: Vec<Queued>) -> Vec<Result<(), JobError>> {
        let next = NextClaim {
            node: &self.node,
            lease: self.lease,
        };
        finalize_with_riders(&self.pool, batch, next).await
    }
}

/// Finalizes `batch` READY, its riders' next claims in one statement ahead of its first
/// transaction; the jobs claimed for riders nobody listens to any more are handed back.
async fn finalize_with_riders(
    pool: &DbPool,
    batch: Vec<Queued>,
    next: NextClaim<'_>,
) -> Vec<Result<(), JobError>> {
    let (attempts, riders): (Vec<ReadyAttempt>, Vec<Option<Rider>>) = batch.into_iter().unzip();
    let riders = Riders::new(next, riders.into_iter().flatten());
    let ahead = (!riders.is_empty())
        .then_some(async move |c: &diesel_async::AsyncPgConnection| riders.claim(c).await);
    let (finalized, orphans) = finalize_ready_all(pool, &attempts, ahead).await;
    let Orphans(orphans) = orphans.unwrap_or_default();
    for orphan in &orphans {
        hand_back(pool, orphan, "claimed for a slot that is gone").await;
    }
    finalized
}

/// Hands back `job`, claimed for a slot that will not run it (`why`), unstarted and with its
/// attempt restored; if that fails, its lease will expire.
async fn hand_back(pool: &DbPool, job: &Claim, why: &str) {
    match release(pool, job).await {
        Ok(()) => tracing::info!(job_id = job.job_id, why, "a job was handed back unstarted"),
        Err(error) => tracing::warn!(job_id = job.job_id, why,
            error = %crate::telemetry::error_chain(&error),
            "could not hand back an unstarted job; its lease will expire"),
    }
}

impl Completer {
    /// Hands back `job`, claimed for this worker's slot but not to be run (`why`): see
    /// [`crate::queue::claim_ahead`], rule 3.
    pub async fn hand_back(&self, job: &Claim, why: &str) {
        hand_back(&self.pool, job, why).await;
    }

    /// A failed attempt: the video FAILED (a permanent error, or no attempt left), or the
    /// job back to PENDING after `delay`. Whether it will be retried.
    pub async fn fail_or_retry(
        &self,
        claim: &Claim,
        error: &MediaError,
        delay: std::time::Duration,
    ) -> Result<bool, JobError> {
        fail_or_retry(&self.pool, claim, error, delay).await
    }

    /// Hands `claim` back with its attempt restored (shutdown, or this node's tools fail).
    pub async fn release(&self, claim: &Claim) -> Result<(), JobError> {
        release(&self.pool, claim).await
    }

    /// Records an attempt whose work goes on in other jobs of a split video (see [`parts`]).
    pub async fn hand_on(&self, claim: &Claim, handed: Handed) -> Result<(), JobError> {
        let pool = &self.pool;
        match handed {
            Handed::Planned(plan) => parts::record_plan(pool, claim, &plan).await,
            Handed::PartStored => parts::record_part_stored(pool, claim).await,
            Handed::Unsplittable(reason, detail) => {
                parts::encode_whole_instead(pool, claim, reason, &detail).await
            }
        }
    }

    /// Records that this node lost `claim`, and why (best effort).
    pub async fn record_lost(&self, claim: &Claim, reason: &str) -> Result<(), JobError> {
        record_lost(&self.pool, claim, reason).await
    }
}

/// One committer's batch (at least one finalize, at most one per slot): finalizes it and
/// answers each. A slot that went away (its task aborted at shutdown) has nothing to hear;
/// its finalize stands.
async fn commit(
    pool: &DbPool,
    batch: Vec<Waiting<Queued, Result<(), JobError>>>,
    next: NextClaim<'_>,
) {
    let (attempts, answers): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|waiting| (waiting.item, waiting.answer))
        .unzip();
    let finalized = finalize_with_riders(pool, attempts, next).await;
    for (answer, finalized) in answers.into_iter().zip(finalized) {
        let _ = answer.send(finalized);
    }
}
