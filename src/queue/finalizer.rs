//! Where a worker's slots send their READY finalizes. A process with one slot finalizes in
//! the slot's own task, as it always has. With several slots, finalizes go through
//! [`COMMITTERS`] committer tasks: a finalize that arrives while both are committing waits,
//! and the first one free takes everything waiting ([`crate::batching`]) into one transaction
//! ([`crate::app::ready_batch`]).
//!
//! Nothing waits for a batch to fill: a finalize on a quiet worker goes alone and at once.
//! Batches grow only while the database is slower than the slots, which is when sharing a
//! commit, a WAL flush and a round trip pays.

use crate::app::jobs::{self, Claim, NextClaim};
use crate::app::ready_batch::{self, Finalized, ReadyAttempt};
use crate::batching::{Groups, Unanswered, Waiting};
use crate::db::DbPool;
use crate::pipeline::AttemptOutput;

use super::runner::WorkerSettings;

/// Batches in flight at once. One committer leaves all of a worker's finalizes to one
/// backend, which runs their statements one after another on one core while the others
/// wait: two let the next batch form and go while one commits.
const COMMITTERS: usize = 2;

/// The finalize path of one worker process. Cloning shares it.
#[derive(Clone)]
pub struct Finalizer(Path);

#[derive(Clone)]
enum Path {
    /// One slot: each finalize runs in its slot's task.
    Alone {
        /// The worker's pool.
        pool: DbPool,
        /// Who claims the next job.
        node: String,
        /// The next claim's lease.
        lease: std::time::Duration,
    },
    /// Several slots: finalizes queue for the committers.
    Batched {
        /// The worker's pool (a finalize whose committer is gone goes alone through it).
        pool: DbPool,
        /// The committers' queue.
        committers: Groups<ReadyAttempt, Finalized>,
    },
}

impl Finalizer {
    /// The finalize path for a worker with `settings`; with more than one slot it starts
    /// the committers on the current runtime, which end once every clone is dropped.
    pub fn start(pool: DbPool, settings: &WorkerSettings) -> Self {
        let (node, lease) = (settings.node_id.clone(), settings.lease);
        let slots = usize::try_from(settings.slots).unwrap_or(usize::MAX);
        if slots <= 1 {
            return Self(Path::Alone { pool, node, lease });
        }
        // Each slot has at most one finalize waiting, so the queue never makes one wait.
        let committers = Groups::start(COMMITTERS, slots, slots, {
            let pool = pool.clone();
            move |batch| {
                let (pool, node) = (pool.clone(), node.clone());
                async move { commit(&pool, batch, &node, lease).await }
            }
        });
        Self(Path::Batched { pool, committers })
    }

    /// Finalizes `claim` READY; with `carry`, the slot's next job is claimed behind the
    /// `COMMIT`. Answers as [`jobs::finalize_ready_then_claim`] does.
    pub async fn finalize_ready(
        &self,
        claim: &Claim,
        output: &AttemptOutput,
        carry: bool,
    ) -> Finalized {
        match &self.0 {
            Path::Alone { pool, node, lease } => {
                let next = carry.then_some(NextClaim {
                    node,
                    lease: *lease,
                });
                jobs::finalize_ready_then_claim(pool, claim, output, next).await
            }
            Path::Batched { pool, committers } => {
                let attempt = ReadyAttempt {
                    claim: claim.clone(),
                    output: output.clone(),
                    carry,
                };
                match committers.submit(attempt).await {
                    Ok(finalized) => finalized,
                    // The committers have ended (they only do when every clone is gone, or
                    // if they panicked): nothing was sent, so this is a first try.
                    Err(Unanswered::NotTaken(_)) => {
                        (jobs::finalize_ready(pool, claim, output).await, None)
                    }
                    // The committer died with this finalize taken, perhaps committed.
                    Err(Unanswered::Lost) => (
                        jobs::finalize_ready_after_failed_batch(pool, claim, output).await,
                        None,
                    ),
                }
            }
        }
    }
}

/// One committer's batch (at least one finalize, at most one per slot): finalizes it and
/// answers each.
async fn commit(
    pool: &DbPool,
    batch: Vec<Waiting<ReadyAttempt, Finalized>>,
    node: &str,
    lease: std::time::Duration,
) {
    let (attempts, answers): (Vec<ReadyAttempt>, Vec<_>) = batch
        .into_iter()
        .map(|waiting| (waiting.item, waiting.answer))
        .unzip();
    let next = NextClaim { node, lease };
    let finalized = ready_batch::finalize_ready_all(pool, &attempts, next).await;
    for (answer, finalized) in answers.into_iter().zip(finalized) {
        // A slot that went away (its task aborted at shutdown) has nothing to hear; its
        // finalize stands, and the next job claimed for it is handed back at once rather
        // than left to its lease.
        if let Err((_, Some(Ok(Some(orphan))))) = answer.send(finalized)
            && let Err(error) = jobs::release(pool, &orphan).await
        {
            tracing::warn!(job_id = orphan.job_id,
                error = %crate::telemetry::error_chain(&error),
                "could not hand back a job claimed for a slot that is gone; its lease will expire");
        }
    }
}
