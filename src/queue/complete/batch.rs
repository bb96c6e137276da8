//! Group commit for a worker's READY finalizes: the finalizes of several slots of one worker
//! process that are ready at the same moment go in one transaction, each still fenced on its
//! own claim, with the claims of the slots' next jobs in one statement in the same flight:
//! ahead of the transaction when the slots hear their claims early ([`EarlyAnswer`]), else
//! behind its `COMMIT`.
//!
//! A finalize is a handful of small writes, and on a busy queue most of its cost is not the
//! rows but what surrounds them: a transaction to start and commit, a WAL flush to wait for,
//! a round trip that wakes a task and a backend. Here N finalizes share one of each, and
//! N claims share one claim statement and its commit.
//!
//! The batch keeps what a finalize alone guarantees (docs/architecture.md, Workers):
//! - its statements take their locks in the lock order's tables (`crate::db`): every
//!   uploader of the batch first, in id order, then the videos, then the events (new rows),
//!   and as the LAST statement the fenced COMPLETED update of every job;
//! - each fence raises when it matches nothing, so one lost claim rolls the whole batch back
//!   on the server, its `COMMIT` included. Then each finalize is tried again on its own,
//!   where the lost one rolls back alone and the others commit;
//! - a batch that failed on a transient error (a broken connection) may have committed, so
//!   each of its finalizes is tried again as a second try, which asks the job row whether
//!   its attempt completed when its fence finds the claim gone.
//!
//! A recording's video needs a read before its event (two round trips), so its finalize
//! goes alone; so does any finalize that finds nobody else waiting.

use diesel_async::AsyncPgConnection;

use super::ahead::{self, release_orphan};
use super::ready::{self, ready_data, ready_facts};
use crate::db::{self, DbPool};
use crate::domain::event::Event;
use crate::domain::job::JobKind;
use crate::pipeline::AttemptOutput;
use crate::queue::error::{fenced, is_transient};
use crate::queue::{CarriedClaim, Claim, ClaimAnswer, JobError, NextClaim, claim};
use crate::sync::Locked;

/// One slot's finished attempt, waiting for its finalize.
#[derive(Debug)]
pub struct ReadyAttempt {
    /// The slot's claim.
    pub claim: Claim,
    /// What the attempt made.
    pub output: AttemptOutput,
    /// Whether the slot wants its next job claimed in the finalize's flight.
    pub carry: bool,
    /// Where the slot hears that claim as soon as it answers; the claim then goes ahead of
    /// the transaction, and the finalize's own answer carries no claim. Without it the claim
    /// goes behind the `COMMIT` and is answered with the finalize.
    pub early: Option<EarlyAnswer>,
}

/// Where a slot hears its next claim as soon as the claim statement answers, while its
/// finalize may still be committing ([`ahead::finalize_ready_claiming_ahead`]). Answered, or
/// dropped unanswered when no claim went out, once.
#[derive(Debug)]
pub struct EarlyAnswer(std::sync::Mutex<Option<ClaimAnswer>>);

impl EarlyAnswer {
    /// Answers go to `answer`.
    pub fn new(answer: ClaimAnswer) -> Self {
        Self(std::sync::Mutex::new(Some(answer)))
    }

    /// The answer's channel, if nobody has taken it yet.
    fn take(&self) -> Option<ClaimAnswer> {
        self.0.locked().take()
    }
}

/// The early answer of `attempt`'s claim, if it carries one and asked to hear it early.
fn early_answer(attempt: &ReadyAttempt) -> Option<ClaimAnswer> {
    attempt
        .early
        .as_ref()
        .and_then(EarlyAnswer::take)
        .filter(|_| attempt.carry)
}

/// What one finalize of a batch comes to: its own answer, and the claim it carried, as
/// [`ready::finalize_ready_then_claim`] answers.
pub type Finalized = (Result<(), JobError>, CarriedClaim);

/// Finalizes every attempt of `batch` READY, together where it can; answers in `batch`'s
/// order. `next` names who claims the next jobs for the attempts that carry a claim.
#[tracing::instrument(name = "finalize_ready_batch", skip_all,
    fields(size = batch.len(), job_ids = ?batch.iter().map(|a| a.claim.job_id).collect::<Vec<_>>()))]
pub async fn finalize_ready_all(
    pool: &DbPool,
    batch: &[ReadyAttempt],
    next: NextClaim<'_>,
) -> Vec<Finalized> {
    let carried = |attempt: &ReadyAttempt| attempt.carry.then_some(next);
    let batchable: Vec<usize> = (0..batch.len())
        .filter(|&i| batch[i].claim.kind != JobKind::Repackage)
        .collect();
    let together = if batchable.len() > 1 {
        batchable
    } else {
        Vec::new()
    };
    let mut answers: Vec<Option<Finalized>> = (0..batch.len()).map(|_| None).collect();
    for (i, attempt) in batch.iter().enumerate() {
        if !together.contains(&i) {
            let (claim, output) = (&attempt.claim, &attempt.output);
            answers[i] = Some(match early_answer(attempt) {
                Some(answer) => (
                    ahead::finalize_ready_claiming_ahead(pool, claim, output, next, answer).await,
                    None,
                ),
                None => {
                    ready::finalize_ready_then_claim(pool, claim, output, carried(attempt)).await
                }
            });
        }
    }
    if together.len() > 1 {
        let members: Vec<&ReadyAttempt> = together.iter().map(|&i| &batch[i]).collect();
        for (i, answer) in together
            .iter()
            .zip(commit_or_retry(pool, &members, next).await)
        {
            answers[*i] = Some(answer);
        }
    }
    answers
        .into_iter()
        .map(|answer| answer.expect("every attempt of the batch is answered"))
        .collect()
}

/// `members` in one transaction, and on its failure each on its own (see the module's doc).
async fn commit_or_retry(
    pool: &DbPool,
    members: &[&ReadyAttempt],
    next: NextClaim<'_>,
) -> Vec<Finalized> {
    let (together, claims) = commit_together(pool, members, next).await;
    match together {
        Ok(()) => {
            crate::metrics::FINALIZE_BATCH_SIZE.observe(members.len() as f64);
            claims.into_iter().map(|claim| (Ok(()), claim)).collect()
        }
        Err(error) => {
            let transient = is_transient(&error);
            tracing::warn!(error = %crate::telemetry::error_chain(&error), size = members.len(),
                transient, "a batch of finalizes failed as a whole; finalizing each on its own");
            // All at once: each waits out its own backoff at the same time as the others
            // instead of after them, and they take the pool's connections as they come.
            let alone = members.iter().map(|member| {
                let (claim, output) = (&member.claim, &member.output);
                async move {
                    if transient {
                        ready::finalize_ready_after_failed_batch(pool, claim, output).await
                    } else {
                        ready::finalize_ready(pool, claim, output).await
                    }
                }
            });
            let finalized = futures_util::future::join_all(alone).await;
            finalized.into_iter().zip(claims).collect()
        }
    }
}

/// The claims found behind the batch, one for each member that carries one, in order: a job,
/// or `Some(Ok(None))` when nothing more was claimable. A failed claim statement is
/// reported to the first carrying member; the others then find no claim made.
fn hand_out(
    members: &[&ReadyAttempt],
    claimed: Option<Result<Vec<Claim>, JobError>>,
) -> Vec<CarriedClaim> {
    let mut found = match claimed {
        Some(Ok(jobs)) => Ok(jobs.into_iter()),
        Some(Err(error)) => Err(Some(error)),
        None => Err(None),
    };
    members
        .iter()
        .map(|member| {
            if !member.carry {
                return None;
            }
            match &mut found {
                Ok(jobs) => Some(Ok(jobs.next())),
                Err(error) => error.take().map(Err),
            }
        })
        .collect()
}

/// One try of the batch's transaction in one round trip, and the claim of the next jobs of
/// the members that carry one in the same flight: ahead of the transaction if any member
/// hears its claim early (each such member hears as soon as the claim answers), else behind
/// its `COMMIT`. Returns the transaction's answer and each member's claim that was not heard
/// early, in order.
async fn commit_together(
    pool: &DbPool,
    members: &[&ReadyAttempt],
    next: NextClaim<'_>,
) -> (Result<(), JobError>, Vec<CarriedClaim>) {
    let wanted = members.iter().filter(|m| m.carry).count();
    let early: Vec<Option<ClaimAnswer>> = members.iter().map(|m| early_answer(m)).collect();
    let ahead = early.iter().any(Option::is_some);
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(error) => return (Err(error.into()), members.iter().map(|_| None).collect()),
    };
    let tx = db::pipelined::PipelinedTx::new(&mut conn);
    let c = tx.conn();
    // Answers the early listeners at once; returns the other members' claims and the jobs
    // claimed for listeners that are gone.
    let claims = async move {
        let claimed = if wanted == 0 {
            None
        } else {
            Some(claim::claim(c, next.node, next.lease, wanted).await)
        };
        let mut orphans = Vec::new();
        let claims = hand_out(members, claimed)
            .into_iter()
            .zip(early)
            .map(|(claimed, early)| match (claimed, early) {
                (Some(claimed), Some(answer)) => {
                    if let Err(Ok(Some(orphan))) = answer.send(claimed) {
                        orphans.push(orphan);
                    }
                    None
                }
                (claimed, _) => claimed,
            })
            .collect::<Vec<_>>();
        (claims, orphans)
    };
    let (together, (claims, orphans)) = if ahead {
        let (claims, together) =
            futures_util::future::join(claims, tx.run(statements(c, members))).await;
        (together, claims)
    } else {
        tx.run_then(statements(c, members), claims).await
    };
    drop(tx);
    drop(conn);
    for orphan in &orphans {
        release_orphan(pool, orphan).await;
    }
    (together, claims)
}

/// The batch's statements, in the lock order, the fenced completions last, each run from its
/// generic plan ([`db::prepared::generic_plans_in_this_transaction`]).
async fn statements(c: &AsyncPgConnection, members: &[&ReadyAttempt]) -> Result<(), JobError> {
    let mut by_video: Vec<&ReadyAttempt> = members.to_vec();
    by_video.sort_by_key(|m| m.claim.video.0);
    let mut by_job: Vec<&ReadyAttempt> = members.to_vec();
    by_job.sort_by_key(|m| m.claim.job_id);
    let events: Vec<Event> = by_video
        .iter()
        .map(|m| {
            Event::video_ready(
                m.claim.video,
                m.claim.run,
                chrono::Utc::now(), // replaced by the video's updated_at (insert_all_stamped)
                ready_data(&m.output, None),
            )
        })
        .collect();
    let facts: Vec<_> = by_video
        .iter()
        .map(|m| ready_facts(&m.claim, &m.output))
        .collect();
    let generic = async {
        db::prepared::generic_plans_in_this_transaction(c)
            .await
            .map_err(JobError::from)
    };
    let owners = async {
        let videos = by_video.iter().map(|m| m.claim.video).collect();
        db::users::lock_owners_of_videos(c, videos)
            .await
            .map_err(JobError::from)
    };
    let videos = async {
        let ids = by_video.iter().map(|m| m.claim.video).collect();
        db::videos::set_all_ready(c, ids, &facts)
            .await
            .map_err(JobError::from)
    };
    let events = async {
        db::deliveries::outbox::insert_all_stamped(c, &events)
            .await
            .map_err(JobError::from)
    };
    let fences = async {
        let ids = by_job.iter().map(|m| m.claim.job_id).collect();
        let tokens = by_job.iter().map(|m| m.claim.token).collect();
        fenced(db::jobs::complete_all(c, ids, tokens).await?)
    };
    let superseded = futures_util::future::try_join_all(
        by_video
            .iter()
            .map(|m| super::ready::owe_superseded(c, &m.claim)),
    );
    // Sent in this order: the plan setting first, then the statements it is for.
    futures_util::try_join!(generic, owners, videos, superseded, events, fences).map(drop)
}
