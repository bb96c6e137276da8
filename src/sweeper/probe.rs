//! What a sweeper tells its health listener (`VIDQ_HEALTH_LISTEN`): healthy while its rounds
//! turn and the database answers; its counters, its queue and its circuit breaker's state
//! in Prometheus' text format.

use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::SweepStats;
use crate::domain::sweep::{Breaker, BreakerState};
use crate::domain::upload::UploadState;
use crate::http::health_listener::Probe;

/// A running sweeper's counters and breaker.
#[derive(Clone, Debug)]
pub struct SweeperProbe {
    pub(super) stats: Arc<SweepStats>,
    pub(super) breaker: Arc<Mutex<Breaker>>,
    /// Longer than this without a round is a stall.
    pub(super) stall: Duration,
}

const BREAKER_STATES: [BreakerState; 3] = [
    BreakerState::Closed,
    BreakerState::HalfOpen,
    BreakerState::Open,
];

impl SweeperProbe {
    fn breaker_state(&self) -> BreakerState {
        self.breaker.lock().expect("breaker lock").state()
    }
}

impl Probe for SweeperProbe {
    fn health(&self) -> Result<serde_json::Value, String> {
        if let Some(error) = self.stats.round_error.lock().expect("round error").clone() {
            return Err(format!("the last round failed: {error}"));
        }
        let last = self.stats.last_round_unix_ms.load(Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let since = Duration::from_millis(now.saturating_sub(last));
        if last == 0 || since > self.stall {
            return Err(format!(
                "no sweeper round has ended for {} s",
                since.as_secs()
            ));
        }
        Ok(json!({
            "status": "ok",
            "breaker": self.breaker_state().as_str(),
            "in_queue": in_queue(&self.stats),
        }))
    }

    fn metrics(&self) -> String {
        let s = &self.stats;
        let load = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
        let state = self.breaker_state();
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in rows {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        family(
            "vidq_sweeper_breaker_state",
            "gauge",
            "The circuit breaker in front of S3: 1 for its current state.",
            BREAKER_STATES
                .iter()
                .map(|b| {
                    (
                        format!("{{state=\"{}\"}}", b.as_str()),
                        u64::from(*b == state),
                    )
                })
                .collect(),
        );
        family(
            "vidq_sweeper_breaker_transitions_total",
            "counter",
            "Times the breaker changed state.",
            vec![(String::new(), load(&s.breaker_transitions))],
        );
        family(
            "vidq_sweeper_queue_rows",
            "gauge",
            "Rows in the in-memory queue or held by an upload worker.",
            vec![(String::new(), in_queue(s))],
        );
        family(
            "vidq_sweeper_rounds_total",
            "counter",
            "Rounds run (a page read through the cursor).",
            vec![(String::new(), load(&s.rounds))],
        );
        family(
            "vidq_sweeper_queue_saturated_total",
            "counter",
            "Rows a full queue refused, left for a later round.",
            vec![(String::new(), load(&s.saturated))],
        );
        family(
            "vidq_sweeper_rows_total",
            "counter",
            "Rows the upload workers finished, by outcome.",
            [
                // A row's outcome is the upload state it left the row in, where it has one.
                (UploadState::Confirmed.as_str(), &s.confirmed),
                ("failed", &s.failed),
                (UploadState::Rejected.as_str(), &s.rejected),
                ("held_by_breaker", &s.held_by_breaker),
            ]
            .into_iter()
            .map(|(outcome, n)| (format!("{{outcome=\"{outcome}\"}}"), load(n)))
            .collect(),
        );
        family(
            "vidq_sweeper_puts_total",
            "counter",
            "PUTs sent to S3.",
            vec![(String::new(), load(&s.puts))],
        );
        family(
            "vidq_sweeper_found_by_head_total",
            "counter",
            "Rows whose object was already in S3 with the right size (no PUT).",
            vec![(String::new(), load(&s.found_by_head))],
        );
        family(
            "vidq_sweeper_expired_total",
            "counter",
            "Uploads expired (presigned never confirmed, or never finished arriving).",
            vec![(String::new(), load(&s.expired))],
        );
        out
    }
}

fn in_queue(stats: &SweepStats) -> u64 {
    stats
        .queued
        .load(Ordering::SeqCst)
        .saturating_sub(stats.done.load(Ordering::SeqCst))
}
