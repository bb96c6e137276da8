//! Where a worker's slots send their READY finalizes. A slot that wants its next job has it
//! claimed ahead of its finalize, in the same flight, and goes on with that job as soon as the
//! claim answers, while the finalize commits on a task of its own. A process with one slot
//! sends each finalize itself ([`jobs::claim_ahead_of_finalize_ready`]). With several slots,
//! finalizes go through [`COMMITTERS`] committer tasks: a finalize that arrives while both
//! are committing waits, and the first one free takes everything waiting
//! ([`crate::batching`]) into one transaction ([`crate::app::ready_batch`]), the next jobs'
//! claims in one statement ahead of it.
//!
//! Nothing waits for a batch to fill: a finalize on a quiet worker goes alone and at once.
//! Batches grow only while the database is slower than the slots, which is when sharing a
//! commit, a WAL flush and a round trip pays.

use crate::app::jobs::{self, CarriedClaim, Claim, JobError, NextClaim};
use crate::app::ready_batch::{self, EarlyAnswer, Finalized, ReadyAttempt};
use crate::batching::{Groups, Unanswered, Waiting};
use crate::db::DbPool;
use crate::pipeline::AttemptOutput;

use super::runner::WorkerSettings;
use tracing::Instrument;

/// Batches in flight at once. One committer leaves all of a worker's finalizes to one
/// backend, which runs their statements one after another on one core while the others
/// wait: two let the next batch form and go while one commits.
const COMMITTERS: usize = 2;

/// The finalize path of one worker process. Cloning shares it.
#[derive(Clone)]
pub struct Finalizer(Path);

#[derive(Clone)]
enum Path {
    /// One slot: the slot sends each finalize itself.
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

    /// Finalizes `claim` READY; with `carry`, the slot's next job is claimed ahead of the
    /// transaction in the same flight, and this returns as soon as that claim answers, with
    /// the finalize still running. Returns the finalize, ended or running, and what the claim
    /// found.
    pub async fn finalize_ready(
        &self,
        claim: &Claim,
        output: &AttemptOutput,
        carry: bool,
    ) -> (Finalizing, CarriedClaim) {
        match &self.0 {
            Path::Alone { pool, node, lease } => {
                if !carry {
                    let finalized = jobs::finalize_ready(pool, claim, output).await;
                    return (Finalizing::Ended(finalized), None);
                }
                let ahead =
                    jobs::claim_ahead_of_finalize_ready(pool, claim, output, node, *lease).await;
                (Finalizing::Running(ahead.finalized), ahead.claimed)
            }
            Path::Batched { pool, committers } => {
                let (answer, claimed) = tokio::sync::oneshot::channel();
                let attempt = ReadyAttempt {
                    claim: claim.clone(),
                    output: output.clone(),
                    carry,
                    early: carry.then(|| EarlyAnswer::new(answer)),
                };
                let finalizing = {
                    let (pool, committers) = (pool.clone(), committers.clone());
                    let (claim, output) = (claim.clone(), output.clone());
                    async move {
                        match committers.submit(attempt).await {
                            Ok((finalized, _)) => finalized,
                            // The committers have ended (they only do when every clone is
                            // gone, or if they panicked): nothing was sent, so this is a
                            // first try.
                            Err(Unanswered::NotTaken(_)) => {
                                jobs::finalize_ready(&pool, &claim, &output).await
                            }
                            // The committer died with this finalize taken, perhaps committed.
                            Err(Unanswered::Lost) => {
                                jobs::finalize_ready_after_failed_batch(&pool, &claim, &output)
                                    .await
                            }
                        }
                    }
                };
                if !carry {
                    return (Finalizing::Ended(finalizing.await), None);
                }
                // The claim answers ahead of the batch's COMMIT; the finalize goes on.
                let task = tokio::spawn(finalizing.in_current_span());
                (Finalizing::Running(task), claimed.await.ok())
            }
        }
    }
}

/// A READY finalize, answered or still running on a task of its own.
pub enum Finalizing {
    /// It has its answer.
    Ended(Result<(), JobError>),
    /// Its task is still running; the task's answer is the finalize's.
    Running(tokio::task::JoinHandle<Result<(), JobError>>),
}

impl Finalizing {
    /// The finalize's answer, once it has one.
    pub async fn answer(self) -> Result<(), JobError> {
        match self {
            Self::Ended(answer) => answer,
            Self::Running(task) => task.await.unwrap_or_else(|error| {
                tracing::error!(%error, "the finalize's task ended without an answer");
                Err(JobError::Unanswered)
            }),
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
        if let Err((_, Some(Ok(Some(orphan))))) = answer.send(finalized) {
            jobs::release_orphan(pool, &orphan).await;
        }
    }
}
