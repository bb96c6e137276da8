//! The claim loop of one worker process: keep up to `slots` attempts running, claim again as
//! soon as one ends or a NOTIFY arrives while this process heads the idle line, poll as the
//! safety net, reap jobs that died in their last attempt, and on shutdown hand every claim
//! back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::JobBody;
use super::complete::Completer;
use super::line::Listeners;
use super::slot::SlotEnd;
use super::{Claim, JobError};
use crate::db::{self, DbPool};
use crate::metrics;
use crate::telemetry::worker_health::WorkerHealth;

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
    /// Renewal interval; `None` keeps the claim's lease as it is (no renewal).
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
    /// None was made: the worker is stopping.
    Stopping,
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
            let found_nothing = !matches!(
                claimed,
                Claimed::Full | Claimed::ToolsBroken | Claimed::Stopping
            );
            idle.send_if_modified(|was| std::mem::replace(was, found_nothing) != found_nothing);
            // A failed claim may have used up the only wake-up this process will get (a
            // notification while it heads the idle line, or the line's catch-up after a
            // reconnect), and a broken pooled connection is replaced on the next checkout:
            // look again soon rather than at the next poll.
            let pause = match claimed {
                Claimed::Failed => self.settings.poll.min(CLAIM_RETRY),
                Claimed::Full | Claimed::Nothing | Claimed::ToolsBroken | Claimed::Stopping => {
                    self.settings.poll
                }
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
            // A slot handing its claim back because the worker stops frees its permit while
            // this round may still run (it began before the stop, in a reap or a claim):
            // that permit must not claim again. The check comes after the count, so a permit
            // freed that way is always seen with the stop (rule 1 of `super::claim_ahead`'s
            // "Claims and a stop").
            if shutdown.is_cancelled() {
                return Claimed::Stopping;
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

    pub(super) fn observe_claim(&self, claimed: Option<&Claim>) {
        if let Some(observe) = &self.on_claim {
            observe(claimed.map(|claim| claim.job_id));
        }
    }
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

/// An attempt task that did not return normally (it panicked outside its body).
fn log_abnormal_end(ended: Result<(), tokio::task::JoinError>) {
    if let Err(error) = ended {
        tracing::error!(%error, "an attempt ended abnormally; its lease will expire");
    }
}

/// Waits (bounded) for the running attempts to hand their claims back, and for the
/// finalizes still committing to answer (rule 5 of `super::claim_ahead`'s "Claims and a
/// stop").
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
