//! The settings of the API node's sweeper as the tests run it.

use std::time::Duration;

use vidq::domain::sweep::{Backoff, BreakerSettings};
use vidq::sweeper::SweeperSettings;

use crate::support::app::SPOOL_NODE;

/// The sweeper of the API's node; it rounds only when woken (the interval is a minute),
/// so an upload that lands quickly was handed over by NOTIFY.
pub fn woken_sweeper() -> SweeperSettings {
    SweeperSettings {
        node_id: SPOOL_NODE.to_owned(),
        page: 128,
        queue: 256,
        workers: 2,
        interval: Duration::from_secs(60),
        claim: Duration::from_secs(900),
        backoff: Backoff::default(),
        breaker: BreakerSettings {
            failures_to_open: 5,
            cool_down: Duration::from_secs(30),
        },
        orphans_every: None,
        orphan_grace: Duration::from_secs(3600),
        live_idle: Duration::from_secs(30),
        live_waiting_ttl: Duration::from_secs(86_400),
        live_grace: Duration::from_secs(10),
    }
}
