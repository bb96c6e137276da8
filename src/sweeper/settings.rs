//! The sweeper's settings, checked, from its flags (`VIDQ_SWEEPER_*`).

use std::time::Duration;

use crate::config::SweeperArgs;
use crate::domain::sweep::{Backoff, BreakerSettings};

/// The sweeper's settings, checked.
#[derive(Clone, Debug)]
pub struct SweeperSettings {
    /// Rows of this node only.
    pub node_id: String,
    /// Rows read per round.
    pub page: u32,
    /// Queue capacity.
    pub queue: usize,
    /// Upload workers.
    pub workers: usize,
    /// Pause between rounds.
    pub interval: Duration,
    /// How long a queued row stays claimed.
    pub claim: Duration,
    /// Per-row retry delays.
    pub backoff: Backoff,
    /// The breaker in front of S3.
    pub breaker: BreakerSettings,
    /// How often the orphan pass runs (`None`: never).
    pub orphans_every: Option<Duration>,
    /// Objects and dead attempts' rows younger than this are left to the work in flight.
    pub orphan_grace: Duration,
    /// This node's live recordings end after this long without a file.
    pub live_idle: Duration,
    /// Files of a recording still count this long after its end.
    pub live_grace: Duration,
    /// This node's recordings never streamed to end (`expired`) this long after creation.
    pub live_waiting_ttl: Duration,
}

impl SweeperArgs {
    /// The settings for `node_id`.
    pub fn settings(&self, node_id: String, live: crate::config::LiveArgs) -> SweeperSettings {
        SweeperSettings {
            node_id,
            page: self.page,
            queue: self.queue as usize,
            workers: self.workers as usize,
            interval: Duration::from_millis(self.interval_ms),
            claim: Duration::from_secs(self.claim_secs),
            backoff: Backoff::default(),
            breaker: BreakerSettings {
                failures_to_open: self.breaker_failures,
                cool_down: Duration::from_millis(self.breaker_cooldown_ms),
            },
            orphans_every: (self.orphan_interval_secs > 0)
                .then(|| Duration::from_secs(self.orphan_interval_secs)),
            orphan_grace: Duration::from_secs(self.orphan_grace_secs),
            live_idle: Duration::from_secs(live.idle_secs),
            live_grace: Duration::from_secs(live.grace_secs),
            live_waiting_ttl: Duration::from_secs(live.waiting_ttl_secs),
        }
    }
}
