//! How an attempt's end is recorded: the single entry is [`Completer`], which every end goes
//! through (READY, FAILED, retry later, release, lost). A READY finalize takes one of three
//! paths, chosen here and nowhere else:
//!
//! - **inline** ([`ready`]): one transaction in one round trip, tried again as [`retry`]
//!   says; with a next claim wanted it rides behind the `COMMIT`;
//! - **pipelined** ([`ahead`]): a worker with one slot sends the freed slot's next claim
//!   ahead of the transaction in the same flight and goes on with that job while the
//!   finalize commits on a task of its own;
//! - **batched** ([`batch`]): with several slots, finalizes go through [`COMMITTERS`]
//!   committer tasks; a finalize that arrives while both are committing waits, and the first
//!   one free takes everything waiting ([`crate::batching`]) into one transaction, the next
//!   jobs' claims in one statement ahead of it.
//!
//! The other ends ([`failed`]) go alone. Nothing waits for a batch to fill: a finalize on a
//! quiet worker goes alone and at once. Batches grow only while the database is slower than
//! the slots, which is when sharing a commit, a WAL flush and a round trip pays.

pub mod ahead;
pub mod batch;
pub mod failed;
pub mod parts;
pub mod ready;
mod retry;

pub use ahead::{ClaimedAhead, claim_ahead_of_finalize_ready, finalize_ready_claiming_ahead};
pub use batch::{EarlyAnswer, Finalized, ReadyAttempt, finalize_ready_all};
pub use failed::{RETRY_DELAY, fail_or_retry, finalize_failed, record_lost, release};
pub use ready::{finalize_ready, finalize_ready_after_failed_batch, finalize_ready_then_claim};

use tracing::Instrument;

use crate::batching::{Groups, Unanswered, Waiting};
use crate::db::DbPool;
use crate::domain::media::MediaError;
use crate::pipeline::{AttemptOutput, Handed};
use crate::queue::{CarriedClaim, Claim, JobError, NextClaim};

/// Batches in flight at once. One committer leaves all of a worker's finalizes to one
/// backend, which runs their statements one after another on one core while the others
/// wait: two let the next batch form and go while one commits.
const COMMITTERS: usize = 2;

/// Where one worker process records its attempts' ends. Cloning shares it.
#[derive(Clone)]
pub struct Completer(Path);

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

impl Completer {
    /// The completion path of a worker whose slots claim as `next`; with more than one of
    /// its `slots` it starts the committers on the current runtime, which end once every
    /// clone is dropped.
    pub fn start(pool: DbPool, next: NextClaim<'_>, slots: u32) -> Self {
        let (node, lease) = (next.node.to_owned(), next.lease);
        let slots = usize::try_from(slots).unwrap_or(usize::MAX);
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
                    let finalized = finalize_ready(pool, claim, output).await;
                    return (Finalizing::Ended(finalized), None);
                }
                let ahead = claim_ahead_of_finalize_ready(pool, claim, output, node, *lease).await;
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
                                finalize_ready(&pool, &claim, &output).await
                            }
                            // The committer died with this finalize taken, perhaps committed.
                            Err(Unanswered::Lost) => {
                                finalize_ready_after_failed_batch(&pool, &claim, &output).await
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

impl Completer {
    fn pool(&self) -> &DbPool {
        match &self.0 {
            Path::Alone { pool, .. } | Path::Batched { pool, .. } => pool,
        }
    }

    /// A failed attempt: the video FAILED (a permanent error, or no attempt left), or the
    /// job back to PENDING after `delay`. Whether it will be retried.
    pub async fn fail_or_retry(
        &self,
        claim: &Claim,
        error: &MediaError,
        delay: std::time::Duration,
    ) -> Result<bool, JobError> {
        fail_or_retry(self.pool(), claim, error, delay).await
    }

    /// Hands `claim` back with its attempt restored (shutdown, or this node's tools fail).
    pub async fn release(&self, claim: &Claim) -> Result<(), JobError> {
        release(self.pool(), claim).await
    }

    /// Records an attempt whose work goes on in other jobs of a split video (see [`parts`]).
    pub async fn hand_on(&self, claim: &Claim, handed: Handed) -> Result<(), JobError> {
        let pool = self.pool();
        match handed {
            Handed::Planned(plan) => parts::record_plan(pool, claim, &plan).await,
            Handed::PartStored => parts::record_part_stored(pool, claim).await,
            Handed::Unstitchable(reason) => parts::encode_whole_instead(pool, claim, &reason).await,
        }
    }

    /// Records that this node lost `claim`, and why (best effort).
    pub async fn record_lost(&self, claim: &Claim, reason: &str) -> Result<(), JobError> {
        record_lost(self.pool(), claim, reason).await
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
    let finalized = finalize_ready_all(pool, &attempts, next).await;
    for (answer, finalized) in answers.into_iter().zip(finalized) {
        // A slot that went away (its task aborted at shutdown) has nothing to hear; its
        // finalize stands, and the next job claimed for it is handed back at once rather
        // than left to its lease.
        if let Err((_, Some(Ok(Some(orphan))))) = answer.send(finalized) {
            ahead::release_orphan(pool, &orphan).await;
        }
    }
}
