//! The sweeper's counters, which its health listener exports on `/metrics`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::db::{self};
use crate::sync::Locked;

/// Counters of one sweeper, each exported by [`super::health`].
#[derive(Debug, Default)]
pub struct SweepStats {
    /// Rounds run.
    pub rounds: AtomicU64,
    /// Rows the queue took.
    pub queued: AtomicU64,
    /// Rows a full queue refused (left for a later round).
    pub saturated: AtomicU64,
    /// PUTs sent.
    pub puts: AtomicU64,
    /// Rows found already in S3 with the right size (no PUT).
    pub found_by_head: AtomicU64,
    /// Rows confirmed by this sweeper.
    pub confirmed: AtomicU64,
    /// Recording files this sweeper put in S3 (CAS `pending -> uploaded`).
    pub files_uploaded: AtomicU64,
    /// Failed tries (backoff stored on the row).
    pub failed: AtomicU64,
    /// Rows rejected for good.
    pub rejected: AtomicU64,
    /// Rows released without a PUT because the breaker was open.
    pub held_by_breaker: AtomicU64,
    /// Breaker state changes.
    pub breaker_transitions: AtomicU64,
    /// Presigned contracts expired.
    pub expired: AtomicU64,
    /// Orphan objects deleted by the orphan pass.
    pub orphans_deleted: AtomicU64,
    /// Dead attempts' `pending` artifact rows forgotten by the orphan pass.
    pub dead_pending_forgotten: AtomicU64,
    /// Queued rows the workers finished with (any outcome).
    pub done: AtomicU64,
    /// When the last round ended, in milliseconds since the Unix epoch (0: none yet).
    pub last_round_unix_ms: AtomicU64,
    /// Why the last round failed; `None` once one works again.
    pub round_error: Mutex<Option<String>>,
}

impl SweepStats {
    /// Records the end of a round and how it went.
    pub(super) fn round_ended(&self, error: Option<&db::DbError>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.last_round_unix_ms.store(now, Ordering::Relaxed);
        *self.round_error.locked() = error.map(|e| crate::telemetry::error_chain(e));
    }

    /// Whether every queued row has been dealt with (the queue is empty and no worker
    /// holds a row).
    pub fn settled(&self) -> bool {
        self.done.load(Ordering::SeqCst) == self.queued.load(Ordering::SeqCst)
    }
}
