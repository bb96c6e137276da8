//! What a sweeper tells its health listener (`VIDQ_HEALTH_LISTEN`): healthy while its rounds
//! turn and the database answers; its counters, its queue and its circuit breaker's state
//! in Prometheus' text format.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::SweepStats;
use crate::domain::sweep::{Breaker, BreakerState};
use crate::domain::upload::UploadState;
use crate::http::health_listener::HealthReport;
use crate::metrics::Exposition;
use crate::sync::Locked;

/// A running sweeper's counters and breaker.
#[derive(Clone, Debug)]
pub struct SweeperHealth {
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

impl SweeperHealth {
    fn breaker_state(&self) -> BreakerState {
        self.breaker.locked().state()
    }
}

impl HealthReport for SweeperHealth {
    fn health(&self) -> Result<serde_json::Value, String> {
        if let Some(error) = self.stats.round_error.locked().clone() {
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
        let exposition = Exposition::new();
        exposition
            .gauge_by(
                "vidq_sweeper_breaker_state",
                "The circuit breaker in front of S3: 1 for its current state.",
                "state",
                BREAKER_STATES
                    .iter()
                    .map(|b| (b.as_str(), f64::from(u8::from(*b == state)))),
            )
            .counter(
                "vidq_sweeper_breaker_transitions_total",
                "Times the breaker changed state.",
                load(&s.breaker_transitions),
            )
            .gauge(
                "vidq_sweeper_queue_rows",
                "Rows in the in-memory queue or held by an upload worker.",
                in_queue(s) as f64,
            )
            .counter(
                "vidq_sweeper_rounds_total",
                "Rounds run (a page read through the cursor).",
                load(&s.rounds),
            )
            .counter(
                "vidq_sweeper_queue_saturated_total",
                "Rows a full queue refused, left for a later round.",
                load(&s.saturated),
            )
            .counter_by(
                "vidq_sweeper_rows_total",
                "Rows the upload workers finished, by outcome.",
                "outcome",
                [
                    // A row's outcome is the upload state it left the row in, where it has one.
                    (UploadState::Confirmed.as_str(), load(&s.confirmed)),
                    ("failed", load(&s.failed)),
                    (UploadState::Rejected.as_str(), load(&s.rejected)),
                    ("held_by_breaker", load(&s.held_by_breaker)),
                ],
            )
            .counter("vidq_sweeper_puts_total", "PUTs sent to S3.", load(&s.puts))
            .counter(
                "vidq_sweeper_found_by_head_total",
                "Rows whose object was already in S3 with the right size (no PUT).",
                load(&s.found_by_head),
            )
            .counter(
                "vidq_sweeper_expired_total",
                "Uploads expired (presigned never confirmed, or never finished arriving).",
                load(&s.expired),
            )
            .counter(
                "vidq_sweeper_live_files_uploaded_total",
                "Live recording files put in S3 (segments, init segments, playlists).",
                load(&s.files_uploaded),
            )
            .counter(
                "vidq_sweeper_orphans_deleted_total",
                "Objects no row owns, deleted by the orphan pass past the grace period.",
                load(&s.orphans_deleted),
            )
            .counter(
                "vidq_sweeper_dead_pending_rows_total",
                "Pending output rows of dead attempts forgotten by the orphan pass.",
                load(&s.dead_pending_forgotten),
            );
        exposition.render()
    }
}

fn in_queue(stats: &SweepStats) -> u64 {
    stats
        .queued
        .load(Ordering::SeqCst)
        .saturating_sub(stats.done.load(Ordering::SeqCst))
}
