//! What a worker process knows about itself, kept as counters the claim loop bumps and the
//! optional health listener reads: whether its last database call worked, whether the loop
//! still turns, whether its media tools run, and how many claims and attempts ended which
//! way.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sync::Locked;

/// How an attempt ended, as the worker recorded it (the order of [`Ended::ALL`], which
/// also indexes the counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// READY committed.
    Ready,
    /// Back to PENDING for another try.
    Retry,
    /// The video failed (permanent error or no attempts left).
    Failed,
    /// The claim was gone (lease lost, fence matched nothing); the result was dropped.
    Lost,
    /// Handed back on shutdown.
    Released,
    /// The end could not be recorded; the lease will expire.
    Unrecorded,
    /// Its work goes on in other jobs of a split video: the head's plan made its parts, a
    /// part's outputs are stored for the stitch, or a stitch sent the video to a whole encode.
    Handed,
}

impl Ended {
    const ALL: [Ended; 7] = [
        Ended::Ready,
        Ended::Retry,
        Ended::Failed,
        Ended::Lost,
        Ended::Released,
        Ended::Unrecorded,
        Ended::Handed,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Ended::Ready => "ready",
            Ended::Retry => "retry",
            Ended::Failed => "failed",
            Ended::Lost => "lost",
            Ended::Released => "released",
            Ended::Unrecorded => "unrecorded",
            Ended::Handed => "handed",
        }
    }
}

/// The worker's own account of itself.
#[derive(Debug)]
pub struct WorkerHealth {
    started: Instant,
    /// Milliseconds after `started` of the claim loop's last turn.
    last_turn_ms: AtomicU64,
    /// The last database call's error; `None` once one succeeds again.
    database_error: Mutex<Option<String>>,
    claims_job: AtomicU64,
    claims_empty: AtomicU64,
    claims_failed: AtomicU64,
    running: AtomicU64,
    ended: [AtomicU64; Ended::ALL.len()],
    /// Attempts in a row whose media tools could not run.
    tool_failures: AtomicU32,
    /// Why this node stopped claiming, while its media tools fail.
    tools_broken: Mutex<Option<String>>,
}

impl Default for WorkerHealth {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            last_turn_ms: AtomicU64::new(0),
            database_error: Mutex::new(None),
            claims_job: AtomicU64::new(0),
            claims_empty: AtomicU64::new(0),
            claims_failed: AtomicU64::new(0),
            running: AtomicU64::new(0),
            ended: Default::default(),
            tool_failures: AtomicU32::new(0),
            tools_broken: Mutex::new(None),
        }
    }
}

/// The health listener's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The loop turns and the database answers.
    Healthy,
    /// Why not.
    Unhealthy(String),
}

impl WorkerHealth {
    /// The claim loop came round.
    pub fn turned(&self) {
        self.last_turn_ms
            .store(self.elapsed_ms(), Ordering::Relaxed);
    }

    /// A claim statement's result: `Some(true)` claimed a job, `Some(false)` found none.
    pub fn claimed(&self, result: Result<bool, String>) {
        let counter = match &result {
            Ok(true) => &self.claims_job,
            Ok(false) => &self.claims_empty,
            Err(_) => &self.claims_failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.database(result.map(drop));
    }

    /// Any other database call's result (the dead-job reaper runs on every poll, busy or not).
    pub fn database(&self, result: Result<(), String>) {
        *self.database_error.locked() = result.err();
    }

    /// An attempt started.
    pub fn attempt_started(&self) {
        self.running.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt ended.
    pub fn attempt_ended(&self, how: Ended) {
        self.running.fetch_sub(1, Ordering::Relaxed);
        self.ended[how as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt's media tools could not run (`reason`: what failed). Counts it, and once
    /// `max` (more than 0) have in a row, marks the node's tools broken. `true` while they
    /// are: the node hands such a claim back and claims nothing more.
    pub fn tool_failed(&self, max: u32, reason: &str) -> bool {
        let in_row = self.tool_failures.fetch_add(1, Ordering::Relaxed) + 1;
        let mut broken = self.tools_broken.locked();
        if max > 0 && in_row >= max && broken.is_none() {
            // The dashboard shows it: no path of the node's in it.
            let reason = crate::domain::failure::strip_paths(reason);
            *broken = Some(format!("{in_row} attempts in a row: {reason}"));
        }
        broken.is_some()
    }

    /// An attempt whose media tools ran (whatever they made of the file).
    pub fn tools_ran(&self) {
        self.tool_failures.store(0, Ordering::Relaxed);
    }

    /// Why the node's media tools count as broken, while they do.
    pub fn tools_broken(&self) -> Option<String> {
        self.tools_broken.locked().clone()
    }

    /// The node's media tools passed their check.
    pub fn tools_work_again(&self) {
        self.tool_failures.store(0, Ordering::Relaxed);
        *self.tools_broken.locked() = None;
    }

    /// Healthy while the loop turned within `stall`, the last database call worked and the
    /// media tools run.
    pub fn verdict(&self, stall: Duration) -> Verdict {
        if let Some(reason) = self.tools_broken() {
            return Verdict::Unhealthy(format!(
                "media tools fail on this node, so it claims nothing; they are tried again every minute ({reason})"
            ));
        }
        if let Some(error) = self.database_error.locked().clone() {
            return Verdict::Unhealthy(format!("database unavailable: {error}"));
        }
        let since = Duration::from_millis(
            self.elapsed_ms()
                .saturating_sub(self.last_turn_ms.load(Ordering::Relaxed)),
        );
        if since > stall {
            return Verdict::Unhealthy(format!(
                "the claim loop has not come round for {} s",
                since.as_secs()
            ));
        }
        Verdict::Healthy
    }

    /// Attempts running now.
    pub fn running(&self) -> u64 {
        self.running.load(Ordering::Relaxed)
    }

    /// The counters in Prometheus' text format, with the process's claim, attempt, time to
    /// READY, heartbeat and ClaimLost families.
    pub fn metrics(&self, slots: u32) -> String {
        use crate::metrics;
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let database_up = self.database_error.locked().is_none();
        let exposition = metrics::Exposition::new();
        exposition
            .gauge(
                "vidq_worker_slots",
                "Attempts this process runs at once.",
                f64::from(slots),
            )
            .gauge(
                "vidq_worker_running",
                "Attempts running now.",
                self.running() as f64,
            )
            .counter_by(
                "vidq_worker_claims_total",
                "Claims made, by what they found (a statement that fills several free slots counts a job for each).",
                "result",
                [
                    ("job", load(&self.claims_job)),
                    ("empty", load(&self.claims_empty)),
                    ("error", load(&self.claims_failed)),
                ],
            )
            .counter_by(
                "vidq_worker_attempts_total",
                "Attempts ended, by how.",
                "outcome",
                Ended::ALL
                    .iter()
                    .zip(&self.ended)
                    .map(|(how, n)| (how.label(), load(n))),
            )
            .gauge(
                "vidq_worker_database_up",
                "1 if the last database call worked.",
                f64::from(u8::from(database_up)),
            )
            .gauge(
                "vidq_worker_tools_up",
                "1 unless the media tools failed VIDQ_WORKER_TOOL_FAILURES attempts in a row (the node then claims nothing).",
                f64::from(u8::from(self.tools_broken().is_none())),
            )
            .family(&*metrics::CLAIM_SECONDS)
            .family(&*metrics::ATTEMPT_SECONDS)
            .family(&*metrics::TIME_TO_READY_SECONDS)
            .family(&*metrics::HEARTBEAT_FAILURES)
            .family(&*metrics::SPLIT_FALLBACKS)
            .family(&*metrics::CLAIMS_LOST)
            .family(&*metrics::FINALIZE_BATCH_SIZE);
        exposition.render()
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_database_call_makes_it_unhealthy_until_one_works() {
        let health = WorkerHealth::default();
        health.turned();
        assert_eq!(health.verdict(Duration::from_secs(5)), Verdict::Healthy);
        health.claimed(Err("connection refused".into()));
        assert_eq!(
            health.verdict(Duration::from_secs(5)),
            Verdict::Unhealthy("database unavailable: connection refused".into())
        );
        health.database(Ok(()));
        assert_eq!(health.verdict(Duration::from_secs(5)), Verdict::Healthy);
    }

    #[test]
    fn a_loop_that_stopped_turning_is_unhealthy() {
        let health = WorkerHealth::default();
        health.turned();
        std::thread::sleep(Duration::from_millis(30));
        assert!(matches!(
            health.verdict(Duration::from_millis(10)),
            Verdict::Unhealthy(why) if why.contains("has not come round")
        ));
    }

    #[test]
    fn metrics_count_claims_and_endings() {
        let health = WorkerHealth::default();
        health.claimed(Ok(true));
        health.attempt_started();
        health.claimed(Ok(false));
        health.claimed(Ok(false));
        let text = health.metrics(2);
        assert!(text.contains("vidq_worker_running 1\n"), "{text}");
        health.attempt_ended(Ended::Ready);
        let text = health.metrics(2);
        assert!(text.contains("vidq_worker_slots 2\n"), "{text}");
        assert!(text.contains("vidq_worker_running 0\n"), "{text}");
        assert!(
            text.contains("vidq_worker_claims_total{result=\"job\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("vidq_worker_claims_total{result=\"empty\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("vidq_worker_attempts_total{outcome=\"ready\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("vidq_worker_attempts_total{outcome=\"lost\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("vidq_worker_database_up 1\n"), "{text}");
    }
}
