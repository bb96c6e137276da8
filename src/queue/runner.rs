//! The claim loop of one worker process: keep up to `slots` attempts running, claim again as
//! soon as one ends or a NOTIFY arrives while this process heads the idle line, poll as the
//! safety net, reap jobs that died in their last attempt, and on shutdown hand every claim
//! back.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::JobBody;
use super::complete::{Completer, Finalizing};
use super::heartbeat::{StopReason, keep_alive};
use super::line::Listeners;
use super::{Claim, JobError};
use crate::db::{self, DbPool};
use crate::domain::media::{MediaError, TOOL_FAILED};
use crate::metrics;
use crate::telemetry::worker_health::{Ended, WorkerHealth};

/// How a worker paces itself.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// Written to `claimed_by`.
    pub node_id: String,
    /// Attempts this process runs at once.
    pub slots: u32,
    /// Safety-net poll interval.
    pub poll: Duration,
    /// Lease taken at claim and renewed by the heartbeat.
    pub lease: Duration,
    /// Renewal interval; `None` keeps the claim's lease as it is (the seed's behaviour).
    pub heartbeat: Option<Duration>,
    /// Hard limit of one attempt.
    pub deadline: Duration,
    /// Wait before a retryable failure is claimed again.
    pub retry_delay: Duration,
    /// Who listens for new jobs while idle (workers: the head of the idle line).
    pub listeners: Listeners,
    /// Attempts in a row whose media tools could not run (`tool_failed`) after which this
    /// node stops claiming until they work again; 0 never stops.
    pub tool_failures: u32,
    /// While stopped for that, how often the tools are tried again.
    pub tool_recheck: Duration,
}

/// Called right after each claim statement with the job it claimed, if any (benchmarks time
/// pickups and count the claims that found nothing).
pub type ClaimObserver = Arc<dyn Fn(Option<i64>) + Send + Sync>;

/// One worker process's engine.
pub struct Runner<B: JobBody> {
    /// Pool for claims, reaps, finalizes (a worker holds at most 2 connections here, and
    /// [`HEARTBEAT_CONNECTIONS`] more for its heartbeats).
    pub pool: DbPool,
    /// For the dedicated LISTEN connection.
    pub database_url: String,
    /// What an attempt does.
    pub body: Arc<B>,
    /// Pacing.
    pub settings: WorkerSettings,
    /// Optional claim hook.
    pub on_claim: Option<ClaimObserver>,
    /// Counters for the health listener.
    pub health: Arc<WorkerHealth>,
}

/// How soon a claim that failed is tried again.
const CLAIM_RETRY: Duration = Duration::from_millis(200);

/// How long shutdown waits for running attempts to hand their claims back.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections of a worker's heartbeat pool. Heartbeats get their own connection instead of a
/// share of the main pool: there they queued behind claims, reaps and every attempt's ledger
/// writes (up to 4 per attempt), so a slow or blocked ledger write could hold renewals past
/// the lease. Sizing the main pool from the slots would not give them that priority (they
/// would still wait in the same queue) and would multiply the database's connections by every
/// node's slots. One renewal is one short UPDATE every few seconds per running attempt: one
/// connection carries those of 64 slots with room to spare.
pub const HEARTBEAT_CONNECTIONS: u32 = 1;

/// What the last round of claims came to.
enum Claimed {
    /// Every slot is busy.
    Full,
    /// A claim found nothing: this process is idle.
    Nothing,
    /// A claim statement failed.
    Failed,
    /// None was made: this node's media tools fail.
    ToolsBroken,
}

impl<B: JobBody> Runner<B> {
    /// Runs until `shutdown`; then stops claiming, stops running attempts (each releases its
    /// claim) and returns.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let wake = Arc::new(Notify::new());
        let idle = self.join_idle_line(&wake, &shutdown);
        let heartbeats = self.heartbeat_pool();
        let next = super::NextClaim {
            node: &self.settings.node_id,
            lease: self.settings.lease,
        };
        let completer = Completer::start(self.pool.clone(), next, self.settings.slots);
        // The ends of attempts whose finalize still commits while their slot goes on.
        let endings = TaskTracker::new();
        let slots = Arc::new(Semaphore::new(self.settings.slots as usize));
        let mut running = JoinSet::new();
        let mut last_reap: Option<Instant> = None;
        // Set when a slot gave up because the claim its finalize carried found nothing: the
        // next turn claims nothing itself and joins the idle line straight away.
        let mut queue_empty = false;
        // When this node's media tools were last tried, while they fail.
        let mut tools_tried: Option<Instant> = None;
        tracing::info!(node = %self.settings.node_id, slots = self.settings.slots, "worker started");
        while !shutdown.is_cancelled() {
            self.health.turned();
            if last_reap.is_none_or(|at| at.elapsed() >= self.settings.poll) {
                self.reap().await;
                last_reap = Some(Instant::now());
            }
            let tools_broken = self.tools_still_broken(&mut tools_tried).await;
            let claimed = if tools_broken {
                Claimed::ToolsBroken
            } else if std::mem::take(&mut queue_empty) {
                Claimed::Nothing
            } else {
                self.fill_slots(
                    &slots,
                    &mut running,
                    &heartbeats,
                    &completer,
                    &endings,
                    &shutdown,
                )
                .await
            };
            // A node that claims nothing because its tools fail leaves the idle line: a
            // notification there would wake it instead of a node that can do the job.
            let found_nothing = !matches!(claimed, Claimed::Full | Claimed::ToolsBroken);
            idle.send_if_modified(|was| std::mem::replace(was, found_nothing) != found_nothing);
            // A failed claim may have used up the only wake-up this process will get (a
            // notification while it heads the idle line, or the line's catch-up after a
            // reconnect), and a broken pooled connection is replaced on the next checkout:
            // look again soon rather than at the next poll.
            let pause = match claimed {
                Claimed::Failed => self.settings.poll.min(CLAIM_RETRY),
                Claimed::Full | Claimed::Nothing | Claimed::ToolsBroken => self.settings.poll,
            };
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = wake.notified() => {}
                () = tokio::time::sleep(pause) => {}
                Some(ended) = running.join_next(), if !running.is_empty() => {
                    queue_empty = slot_found_queue_empty(ended);
                }
            }
        }
        drain(running, endings).await;
    }

    /// Whether this node's media tools still fail: once they have failed
    /// `tool_failures` attempts in a row, they are tried again every `tool_recheck` (the
    /// first time one `tool_recheck` after they were found failing) until they work.
    async fn tools_still_broken(&self, tried: &mut Option<Instant>) -> bool {
        let Some(reason) = self.health.tools_broken() else {
            *tried = None;
            return false;
        };
        let last = *tried.get_or_insert_with(Instant::now);
        if last.elapsed() < self.settings.tool_recheck {
            return true;
        }
        *tried = Some(Instant::now());
        match self.body.check_tools().await {
            Ok(()) => {
                self.health.tools_work_again();
                tracing::info!(was = %reason, "this node's media tools work again; claiming again");
                false
            }
            Err(error) => {
                tracing::warn!(%error, "this node's media tools still fail; not claiming");
                true
            }
        }
    }

    /// Stands in the idle line while the returned flag says this process is idle; a
    /// notification there wakes `wake`.
    fn join_idle_line(
        &self,
        wake: &Arc<Notify>,
        shutdown: &CancellationToken,
    ) -> watch::Sender<bool> {
        let on_notify = {
            let wake = wake.clone();
            move || wake.notify_one()
        };
        // Whether this process has a free slot and its last claim found nothing: only then
        // does it stand in the idle line for notifications.
        let (idle, idle_rx) = watch::channel(false);
        super::line::spawn(
            self.database_url.clone(),
            db::jobs::JOBS_CHANNEL,
            self.settings.listeners,
            idle_rx,
            on_notify,
            shutdown.child_token(),
        );
        idle
    }

    /// The heartbeats' own pool (see [`HEARTBEAT_CONNECTIONS`]); the main pool if the URL
    /// cannot make one (it made the main pool, so that does not happen).
    fn heartbeat_pool(&self) -> DbPool {
        db::pool::unchecked(&self.database_url, HEARTBEAT_CONNECTIONS).unwrap_or_else(|error| {
            tracing::warn!(error = %crate::telemetry::error_chain(&error),
                "no separate heartbeat pool; heartbeats share the main pool");
            self.pool.clone()
        })
    }

    /// Closes jobs that died in their last attempt; the outcome feeds the health report.
    async fn reap(&self) {
        let reaped = super::reaper::reap_dead(&self.pool).await;
        if let Err(error) = &reaped {
            tracing::warn!(error = %crate::telemetry::error_chain(error), "reaping dead jobs failed");
        }
        self.health.database(
            reaped
                .map(drop)
                .map_err(|e| crate::telemetry::error_chain(&e)),
        );
    }

    /// Claims until every slot is busy or a claim finds nothing (or fails), starting an
    /// attempt for each job claimed. Several free slots are filled by one claim statement.
    async fn fill_slots(
        self: &Arc<Self>,
        slots: &Arc<Semaphore>,
        running: &mut JoinSet<SlotEnd>,
        heartbeats: &DbPool,
        completer: &Completer,
        endings: &TaskTracker,
        shutdown: &CancellationToken,
    ) -> Claimed {
        loop {
            // Permits only come back while this loop runs (a slot ending), never go: the
            // ones counted here are still free when taken below.
            let free = slots.available_permits();
            if free == 0 {
                return Claimed::Full;
            }
            let claimed = match self.claim_up_to(free).await {
                Ok(claimed) => claimed,
                Err(error) => {
                    let error = crate::telemetry::error_chain(&error);
                    tracing::warn!(%error, "claim failed");
                    self.health.claimed(Err(error));
                    return Claimed::Failed;
                }
            };
            let found = claimed.len();
            for claim in claimed {
                let permit = slots
                    .clone()
                    .try_acquire_owned()
                    .expect("a slot counted free is free");
                self.health.claimed(Ok(true));
                self.health.attempt_started();
                let slot = self.clone().slot(
                    claim,
                    permit,
                    heartbeats.clone(),
                    completer.clone(),
                    endings.clone(),
                    shutdown.clone(),
                );
                running.spawn(slot);
            }
            if found < free {
                self.health.claimed(Ok(false));
                return Claimed::Nothing;
            }
        }
    }

    /// Claims up to `free` jobs in one claim statement ([`super::claim::claim`]).
    async fn claim_up_to(&self, free: usize) -> Result<Vec<Claim>, JobError> {
        let asked = Instant::now();
        let conn = self.pool.get().await?;
        let settings = &self.settings;
        let claimed = super::claim::claim(&conn, &settings.node_id, settings.lease, free).await?;
        metrics::observe(&metrics::CLAIM_SECONDS, asked.elapsed());
        for claim in &claimed {
            self.observe_claim(Some(claim));
        }
        if claimed.len() < free {
            self.observe_claim(None);
        }
        Ok(claimed)
    }

    fn observe_claim(&self, claimed: Option<&Claim>) {
        if let Some(observe) = &self.on_claim {
            observe(claimed.map(|claim| claim.job_id));
        }
    }

    /// One slot's life: runs `claim`, and as long as each finalize brings the next job (see
    /// [`super::complete::finalize_ready_then_claim`]) runs that one too. The slot is given back when an
    /// attempt ends without a next job; the claim loop then takes over.
    async fn slot(
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
        let worked = started.elapsed();
        let why = reason.get().copied();
        // Ends the heartbeat and the deadline watch (neither sets a reason on this path).
        stop.cancel();
        let carry = !shutdown.is_cancelled();
        self.conclude(claim, result, why, worked, completer, endings, carry)
            .await
    }

    /// Records how the attempt ended. With `carry`, a READY finalize also claims the slot's
    /// next job in its flight; returned is what that claim found. The claim goes ahead of the
    /// finalize's transaction and answers first: the slot goes on with its next job at once,
    /// and the rest of this attempt's end is recorded by a task of `endings` once the
    /// finalize answers.
    #[allow(clippy::too_many_arguments)]
    async fn conclude(
        self: &Arc<Self>,
        claim: Claim,
        result: Result<crate::pipeline::AttemptOutput, MediaError>,
        why: Option<StopReason>,
        worked: Duration,
        completer: &Completer,
        endings: &TaskTracker,
        carry: bool,
    ) -> Next {
        let (outcome, next) = match result {
            // A finished result is always offered to the fenced finalize, even when the
            // heartbeat gave up (a renewal that timed out may still have committed): the
            // fence, not this node's guess, decides whether the claim is still ours.
            Ok(output) => {
                let (finalizing, next) =
                    self.finalize_ready(&claim, &output, completer, carry).await;
                if let Finalizing::Running(_) = finalizing {
                    let (this, completer) = (self.clone(), completer.clone());
                    endings.spawn(
                        async move {
                            let outcome = this.ready(&claim, finalizing.answer().await).await;
                            this.record_end(&claim, outcome, why, worked, &completer)
                                .await;
                        }
                        .in_current_span(),
                    );
                    return next;
                }
                (self.ready(&claim, finalizing.answer().await).await, next)
            }
            Err(error) => (
                self.not_ready(&claim, error, why, completer).await,
                Next::NotAsked,
            ),
        };
        self.record_end(&claim, outcome, why, worked, completer)
            .await;
        next
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
        self.body
            .after_ready(claim.video, claim.run, claim.attempt)
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
    /// the attempt's duration (`worked`, its body's time) are updated.
    async fn record_end(
        &self,
        claim: &Claim,
        outcome: Result<Ended, JobError>,
        why: Option<StopReason>,
        worked: Duration,
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
            let at = if why == Some(StopReason::Lost) {
                "heartbeat"
            } else {
                "finalize"
            };
            metrics::CLAIMS_LOST.with_label_values(&[at]).inc();
        }
        self.health.attempt_ended(ended);
        metrics::ATTEMPT_SECONDS
            .with_label_values(&[claim.kind.as_str(), ended.label()])
            .observe(worked.as_secs_f64());
    }

    /// The READY finalize; with `carry`, carrying the claim of the slot's next job, and what
    /// that claim found.
    async fn finalize_ready(
        &self,
        claim: &Claim,
        output: &crate::pipeline::AttemptOutput,
        completer: &Completer,
        carry: bool,
    ) -> (Finalizing, Next) {
        // Counted with the other claims; not timed in `CLAIM_SECONDS`, as its round trip is
        // the finalize's.
        let (finalized, claimed) = completer.finalize_ready(claim, output, carry).await;
        let next = match claimed {
            Some(Ok(claimed)) => {
                self.health.claimed(Ok(claimed.is_some()));
                self.observe_claim(claimed.as_ref());
                claimed.map_or(Next::QueueEmpty, |claimed| Next::Job(Box::new(claimed)))
            }
            Some(Err(error)) => {
                let error = crate::telemetry::error_chain(&error);
                tracing::warn!(%error, "the claim sent with the finalize failed");
                self.health.claimed(Err(error));
                Next::NotAsked
            }
            None => Next::NotAsked,
        };
        (finalized, next)
    }
}

/// What the claim a finalize carried found.
enum Next {
    /// No claim went with the finalize (shutting down, another ending than READY, a failed
    /// claim or a failed first try): the claim loop looks.
    NotAsked,
    /// The slot's next job.
    Job(Box<Claim>),
    /// Nothing was claimable.
    QueueEmpty,
}

/// How a slot ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotEnd {
    /// Its finalize's claim found nothing claimable.
    QueueEmpty,
    /// Any other way.
    Other,
}

/// Whether the slot ended on a claim that found nothing (logged if it ended abnormally).
fn slot_found_queue_empty(ended: Result<SlotEnd, tokio::task::JoinError>) -> bool {
    match ended {
        Ok(end) => end == SlotEnd::QueueEmpty,
        Err(error) => {
            log_abnormal_end(Err(error));
            false
        }
    }
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

/// An attempt task that did not return normally (it panicked outside its body).
fn log_abnormal_end(ended: Result<(), tokio::task::JoinError>) {
    if let Err(error) = ended {
        tracing::error!(%error, "an attempt ended abnormally; its lease will expire");
    }
}

/// Waits (bounded) for the running attempts to hand their claims back, and for the
/// finalizes still committing to answer.
async fn drain(mut running: JoinSet<SlotEnd>, endings: TaskTracker) {
    tracing::info!(
        running = running.len(),
        finalizing = endings.len(),
        "worker stopping; handing claims back"
    );
    endings.close();
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while let Some(ended) = running.join_next().await {
            log_abnormal_end(ended.map(drop));
        }
        endings.wait().await;
    })
    .await;
    if drained.is_err() {
        tracing::error!("attempts did not stop in time; their leases will expire");
    }
    tracing::info!("worker stopped");
}
