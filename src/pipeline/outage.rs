//! Waiting out an S3 outage inside an attempt: reading the original, storing the outputs,
//! and removing superseded attempts' objects after a READY all try again, with backoff,
//! while S3 does not answer (no connection, no answer in time, a 5xx or 429), for as long
//! as one patience counted from the first failure. S3 refusing a request (a 4xx:
//! credentials, policy) is not waited out: the next try would be refused too.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::adapters::storage::StorageError;
use crate::domain::media::MediaError;
use crate::sync::Locked;

/// First and longest pause between tries of an S3 that did not answer.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(5));

/// One patience, shared by every transfer that waits with it (an attempt's outputs go four
/// at a time: an outage costs the attempt at most the patience, however many wait).
pub struct Outage {
    patience: Duration,
    since: Mutex<Option<Instant>>,
    pause: Mutex<Duration>,
}

impl Outage {
    /// Nothing has failed yet.
    pub fn new(patience: Duration) -> Self {
        Self {
            patience,
            since: Mutex::new(None),
            pause: Mutex::new(BACKOFF.0),
        }
    }

    /// After `error` from a call on `key` (`doing` names the step in the log): waits before
    /// the next try when it is an outage and patience is left. Otherwise, or when `cancel`
    /// fires meanwhile, the attempt's error.
    pub async fn wait_out(
        &self,
        error: StorageError,
        key: &str,
        doing: &str,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        if !error.outage {
            return Err(super::outputs::storage_error(error));
        }
        let now = Instant::now();
        let since = *self.since.locked().get_or_insert(now);
        let pause = {
            let mut pause = self.pause.locked();
            let this = *pause;
            *pause = (this * 2).min(BACKOFF.1);
            this
        };
        if now + pause > since + self.patience {
            return Err(super::outputs::storage_error(error));
        }
        tracing::warn!(error = %crate::telemetry::error_chain(&error), %key,
            retry_in_ms = pause.as_millis() as u64,
            "object storage did not answer while {doing}; trying again");
        super::until_cancelled(cancel, tokio::time::sleep(pause)).await
    }
}
