//! One slot of a worker: it runs its claimed attempt under a heartbeat and a deadline,
//! records how the attempt ended through the [`Completer`], and goes on with the next job
//! claimed ahead of its READY finalize ([`super::claim_ahead`]), until an attempt ends
//! without one.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::claim_ahead::{Heard, NextJob, Rider};
use super::complete::{Completer, ReadyAttempt};
use super::heartbeat::{StopReason, keep_alive};
use super::runner::Runner;
use super::{Claim, JobBody, JobError};
use crate::db::DbPool;
use crate::domain::keys;
use crate::domain::media::{MediaError, TOOL_FAILED};
use crate::metrics;
use crate::telemetry::worker_health::Ended;

impl<B: JobBody> Runner<B> {
    /// One slot's life: runs `claim`, and as long as each finalize brings the next job (see
    /// [`super::claim_ahead`]) runs that one too. The slot is given back when an attempt ends
    /// without a next job; the claim loop then takes over.
    pub(super) async fn slot(
        self: Arc<Self>,
        mut claim: Claim,
        _slot: OwnedSemaphorePermit,
        heartbeats: DbPool,
        completer: Completer,
        endings: TaskTracker,
        shutdown: CancellationToken,
    ) -> SlotEnd {
        loop {
            match self
                .clone()
                .attempt(
                    claim,
                    heartbeats.clone(),
                    &completer,
                    &endings,
                    shutdown.clone(),
                )
                .await
            {
                Next::Job(next) => {
                    self.health.attempt_started();
                    claim = *next;
                }
                Next::QueueEmpty => return SlotEnd::QueueEmpty,
                Next::NotAsked => return SlotEnd::Other,
            }
        }
    }

    /// Runs one claimed attempt to its recorded end; returns what the claim its finalize
    /// carried found, if it carried one.
    #[tracing::instrument(skip_all, fields(job_id = claim.job_id, video_id = %claim.video, attempt = claim.attempt))]
    async fn attempt(
        self: Arc<Self>,
        claim: Claim,
        heartbeats: DbPool,
        completer: &Completer,
        endings: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Next {
        tracing::info!("claimed");
        let stop = CancellationToken::new();
        // However this attempt ends (its body returns or panics, or this task is dropped),
        // the guard fires `stop`, which ends the heartbeat and the deadline watch: a lease is
        // renewed only while its attempt lives.
        let _stop_on_exit = stop.clone().drop_guard();
        let reason = Arc::new(OnceLock::new());
        if let Some(every) = self.settings.heartbeat {
            tokio::spawn(keep_alive(
                heartbeats,
                claim.clone(),
                self.settings.lease,
                every,
                stop.clone(),
                reason.clone(),
            ));
        }
        tokio::spawn({
            let (stop, reason, deadline, shutdown) = (
                stop.clone(),
                reason.clone(),
                self.settings.deadline,
                shutdown.clone(),
            );
            async move {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = shutdown.cancelled() => { let _ = reason.set(StopReason::Shutdown); }
                    () = tokio::time::sleep(deadline) => { let _ = reason.set(StopReason::Deadline); }
                }
                stop.cancel();
            }
        });
        let plan = claim.plan();
        // A panicking body is a failed attempt like any other: caught here, it goes through
        // the same fenced retry as an error, instead of ending the task with the claim open.
        let started = Instant::now();
        let result = AssertUnwindSafe(self.body.run(&plan, &stop))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Err(panicked(panic.as_ref())));
        let ended = Ending {
            why: reason.get().copied(),
            worked: started.elapsed(),
        };
        // Ends the heartbeat and the deadline watch (neither sets a reason on this path).
        stop.cancel();
        self.conclude(claim, result, ended, completer, endings, &shutdown)
            .await
    }

    /// Records how the attempt ended. A READY finalize also claims the slot's next job
    /// ahead of its transaction unless the worker is `stopping` (`claim_ahead`, rule 2): the
    /// slot goes on with that job as soon as the claim answers, and the rest of this
    /// attempt's end is recorded by a task of `endings` once the finalize answers.
    async fn conclude(
        self: &Arc<Self>,
        claim: Claim,
        result: Result<crate::pipeline::Attempted, MediaError>,
        ended: Ending,
        completer: &Completer,
        endings: &TaskTracker,
        stopping: &CancellationToken,
    ) -> Next {
        let outcome = match result {
            // A finished result is always offered to the fenced finalize, even when the
            // heartbeat gave up (a renewal that timed out may still have committed): the
            // fence, not this node's guess, decides whether the claim is still ours.
            Ok(crate::pipeline::Attempted::Ready(output)) => {
                let attempt = ReadyAttempt {
                    claim: claim.clone(),
                    output,
                };
                let Some((rider, next)) = Rider::unless_stopping(stopping) else {
                    let finalized = completer.finalize_ready(attempt, None).await;
                    let outcome = self.ready(&claim, finalized).await;
                    self.record_end(&claim, outcome, ended, completer).await;
                    return Next::NotAsked;
                };
                let (this, completer_of_task) = (self.clone(), completer.clone());
                endings.spawn(
                    async move {
                        let finalized =
                            completer_of_task.finalize_ready(attempt, Some(rider)).await;
                        let outcome = this.ready(&claim, finalized).await;
                        this.record_end(&claim, outcome, ended, &completer_of_task)
                            .await;
                    }
                    .in_current_span(),
                );
                return self.next_job(next, completer, stopping).await;
            }
            Ok(crate::pipeline::Attempted::Handed(handed)) => {
                completer.hand_on(&claim, handed).await.map(|()| {
                    self.health.tools_ran();
                    Ended::Handed
                })
            }
            Err(error) => self.not_ready(&claim, error, ended.why, completer).await,
        };
        self.record_end(&claim, outcome, ended, completer).await;
        Next::NotAsked
    }

    /// What a READY finalize's answer means for the attempt.
    async fn ready(
        &self,
        claim: &Claim,
        finalized: Result<(), JobError>,
    ) -> Result<Ended, JobError> {
        finalized?;
        self.health.tools_ran();
        tracing::info!("video ready");
        metrics::observe(&metrics::TIME_TO_READY_SECONDS, claim.waited.until_now());
        let split = claim.kind == crate::domain::job::JobKind::Stitch;
        let dead = keys::superseded_prefixes(claim.video, claim.run, claim.attempt, split);
        self.body
            .after_ready(claim.video, claim.run, claim.attempt, dead)
            .await;
        Ok(Ended::Ready)
    }

    /// Records an attempt that ended without a result: lost, handed back, past its
    /// deadline, or failed.
    async fn not_ready(
        &self,
        claim: &Claim,
        error: MediaError,
        why: Option<StopReason>,
        completer: &Completer,
    ) -> Result<Ended, JobError> {
        match why {
            Some(StopReason::Lost) => {
                tracing::warn!("claim lost during the attempt; its result is dropped");
                completer.record_lost(claim, "lease lost during the attempt")
                    .await
                    .map(|()| Ended::Lost)
            }
            Some(StopReason::Shutdown) => completer.release(claim).await.map(|()| {
                tracing::info!("claim handed back for another node");
                Ended::Released
            }),
            Some(StopReason::Deadline) => {
                let error = MediaError::retryable(
crate::domain::failure::FailureCode::DeadlineExceeded,
                    format!("the attempt ran past {:?}", self.settings.deadline),
                );
                completer.fail_or_retry(claim, &error, self.settings.retry_delay)
                    .await
                    .map(|retrying| {
                        if retrying {
                            Ended::Retry
                        } else {
                            Ended::Failed
                        }
                    })
            }
            // The node's tools could not run: past the limit, the claim goes back with its
            // attempt restored (as at a shutdown) and the node stops claiming, so a broken
            // node does not use up every video's attempts.
            None if error.code == TOOL_FAILED
                && self.health.tool_failed(self.settings.tool_failures, &error.message) =>
            {
                completer.release(claim).await.map(|()| {
                    tracing::warn!(code = error.code.as_str(), message = %error.message, "this node's media tools fail; the claim is handed back for another node and this node claims nothing until they work again");
                    Ended::Released
                })
            }
            None => {
                if error.code != TOOL_FAILED {
                    self.health.tools_ran();
                }
                match completer.fail_or_retry(claim, &error, self.settings.retry_delay)
                    .await
                {
                    Ok(true) => {
                        tracing::warn!(code = error.code.as_str(), message = %error.message, "attempt failed; retrying later");
                        Ok(Ended::Retry)
                    }
                    Ok(false) => {
                        tracing::warn!(code = error.code.as_str(), message = %error.message, "video failed");
                        Ok(Ended::Failed)
                    }
                    Err(err) => Err(err),
                }
            }
        }
    }

    /// The end of an attempt, however it went: a claim found lost at the fence is logged as
    /// lost, an end that could not be recorded is left to the lease, and the counters and
    /// the attempt's duration (its body's time) are updated.
    async fn record_end(
        &self,
        claim: &Claim,
        outcome: Result<Ended, JobError>,
        body: Ending,
        completer: &Completer,
    ) {
        let ended = match outcome {
            Ok(ended) => ended,
            Err(JobError::ClaimLost) => {
                tracing::warn!("claim lost before the result was recorded; nothing was written");
                let _ = completer
                    .record_lost(claim, "fence matched nothing at finalize")
                    .await;
                Ended::Lost
            }
            Err(error) => {
                tracing::error!(
                    error = %crate::telemetry::error_chain(&error),
                    "could not record the attempt's end; its lease will expire and another node will retry"
                );
                Ended::Unrecorded
            }
        };
        if ended == Ended::Lost {
            // Once per lost claim, by who noticed first.
            let at = if body.why == Some(StopReason::Lost) {
                "heartbeat"
            } else {
                "finalize"
            };
            metrics::CLAIMS_LOST.with_label_values(&[at]).inc();
        }
        self.health.attempt_ended(ended);
        metrics::ATTEMPT_SECONDS
            .with_label_values(&[claim.kind.as_str(), ended.label()])
            .observe(body.worked.as_secs_f64());
    }

    /// What the claim sent ahead of the finalize found, as the slot's next step: a job
    /// heard once the worker is stopping is handed back unstarted (`claim_ahead`, rule 3).
    async fn next_job(
        &self,
        next: NextJob,
        completer: &Completer,
        stopping: &CancellationToken,
    ) -> Next {
        // Counted with the other claims; not timed in `CLAIM_SECONDS`, as its round trip is
        // the finalize's.
        match next.heard(stopping).await {
            Heard::Job(job) => {
                self.health.claimed(Ok(true));
                self.observe_claim(Some(&job));
                Next::Job(Box::new(job))
            }
            Heard::QueueEmpty => {
                self.health.claimed(Ok(false));
                self.observe_claim(None);
                Next::QueueEmpty
            }
            Heard::Failed(error) => {
                let error = crate::telemetry::error_chain(&error);
                tracing::warn!(%error, "the claim sent with the finalize failed");
                self.health.claimed(Err(error));
                Next::NotAsked
            }
            Heard::Nothing => Next::NotAsked,
            Heard::AfterStop(job) => {
                self.observe_claim(Some(&job));
                completer
                    .hand_back(&job, "claimed as the worker stopped")
                    .await;
                Next::NotAsked
            }
        }
    }
}

/// How an attempt's body ended: why it was stopped, if it was, and how long it worked.
#[derive(Clone, Copy, Debug)]
struct Ending {
    why: Option<StopReason>,
    worked: Duration,
}

/// What a slot does after an attempt.
enum Next {
    /// No next job was heard (stopping, another ending than READY, a failed claim, none
    /// sent, or one handed back at the stop): the claim loop looks.
    NotAsked,
    /// The slot's next job.
    Job(Box<Claim>),
    /// Nothing was claimable.
    QueueEmpty,
}

/// How a slot ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotEnd {
    /// The claim sent ahead of its finalize found nothing claimable.
    QueueEmpty,
    /// Any other way.
    Other,
}

/// The error a panicked attempt is recorded with; what it said goes to the log only.
fn panicked(payload: &(dyn std::any::Any + Send)) -> MediaError {
    let said = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(panic = %said, "the attempt panicked; recording it as a retryable failure");
    MediaError::retryable(
        crate::domain::failure::FailureCode::InternalError,
        "the attempt stopped on an internal error",
    )
}
