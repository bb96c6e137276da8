//! The upload sweeper: re-drives this node's pending uploads from the ledger to S3 and
//! expires lapsed presigned contracts (docs/architecture.md, "Upload recovery").
//! `roles::sweeper` runs it.
//!
//! One loop reads a page of due rows through the forward cursor (claiming them), offers
//! them to a bounded queue with `try_send` (a full queue is saturation: counted, the rest of
//! the page released for a later round), and N upload workers take rows off it: check the
//! spool file at the file boundary, ask the circuit breaker, HEAD the contracted key (an
//! object of the right size means the PUT landed before a crash) or PUT it, then confirm in
//! the confirm's one transaction (`app::uploads::accept`). A failed try stores its backoff
//! on the row. The database row is the ledger; the queue is only a throttle.
//!
//! Here: the round loop ([`Sweeper`]). Beside it: the upload workers (`work`, and `files`
//! for a recording's files), the orphan pass (`orphans`), expiry (`expiry`), the counters
//! ([`SweepStats`]), the settings ([`SweeperSettings`]), the S3 calls ([`SweepStore`]) and
//! what its health listener reads (`probe`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::adapters::spool::SpoolRoot;
use crate::app::AppError;
use crate::db::{self, DbPool};
use crate::domain::ids::UploadId;
use crate::domain::sweep::{Breaker, Cursor};
use crate::sync::Locked;

mod doomed;
mod expiry;
mod files;
pub mod health;
mod orphans;
mod settings;
mod stats;
mod store;
mod work;

pub use orphans::{ORPHAN_PASS_LOCK, OrphanPass};
pub use settings::SweeperSettings;
pub use stats::SweepStats;
pub use store::SweepStore;
use work::Work;

/// What one round did.
#[derive(Debug, Default)]
pub struct Round {
    /// Rows read (and claimed).
    pub read: usize,
    /// Ids the queue took, in id order.
    pub queued: Vec<UploadId>,
    /// Rows the full queue refused.
    pub saturated: usize,
    /// The breaker was open: nothing was read.
    pub skipped_by_breaker: bool,
    /// Recording files the queue took.
    pub files_queued: usize,
}

struct Shared<S> {
    pool: DbPool,
    store: S,
    root: SpoolRoot,
    settings: SweeperSettings,
    breaker: Arc<Mutex<Breaker>>,
    stats: Arc<SweepStats>,
    /// Whether the orphan pass may run: the bucket namespace is this deployment's (set by
    /// the role once its marker is checked; `true` when nobody holds the pass back).
    orphans_allowed: Mutex<Arc<std::sync::atomic::AtomicBool>>,
}

/// A running sweeper: the reader side ([`Sweeper::round`]) and its upload workers.
pub struct Sweeper<S: SweepStore> {
    shared: Arc<Shared<S>>,
    cursor: Cursor<UploadId>,
    queue: mpsc::Sender<Work>,
    /// The forward cursor over recording files (`recording_files.id`).
    file_cursor: Cursor<i64>,
    workers: tokio::task::JoinSet<()>,
    /// Ticked when an upload through vidq completes (NOTIFY on `vidq_sweep`): the next
    /// round starts at once instead of after the interval.
    wake: Arc<tokio::sync::Notify>,
    /// Whether the last round found the queue full (its warning is said once).
    saturated_before: bool,
}

impl<S: SweepStore> Sweeper<S> {
    /// Starts the upload workers; rounds are driven by [`Sweeper::run`] or, in tests and
    /// the bench, by [`Sweeper::round`]. `shutdown` stops the workers (rows still queued are
    /// released).
    pub fn start(
        pool: DbPool,
        store: S,
        root: SpoolRoot,
        settings: SweeperSettings,
        shutdown: CancellationToken,
    ) -> Self {
        let (tx, rx) = mpsc::channel(settings.queue.max(1));
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let shared = Arc::new(Shared {
            pool,
            store,
            root,
            breaker: Arc::new(Mutex::new(Breaker::new(settings.breaker))),
            settings,
            stats: Arc::default(),
            orphans_allowed: Mutex::new(Arc::new(std::sync::atomic::AtomicBool::new(true))),
        });
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..shared.settings.workers.max(1) {
            let shared = shared.clone();
            let rx = rx.clone();
            let shutdown = shutdown.clone();
            workers.spawn(async move { shared.work(rx, shutdown).await });
        }
        Self {
            cursor: Cursor::new(shared.settings.page),
            file_cursor: Cursor::new(shared.settings.page),
            shared,
            queue: tx,
            workers,
            wake: Arc::default(),
            saturated_before: false,
        }
    }

    /// The counters.
    pub fn stats(&self) -> Arc<SweepStats> {
        self.shared.stats.clone()
    }

    /// What the health listener reports: the counters and the breaker.
    pub fn health(&self) -> health::SweeperHealth {
        health::SweeperHealth {
            stats: self.shared.stats.clone(),
            breaker: self.shared.breaker.clone(),
            stall: self.shared.settings.interval * 3 + Duration::from_secs(10),
        }
    }

    /// What starts a round early (the role ticks it on every `vidq_sweep` NOTIFY).
    pub fn waker(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }

    /// One round: claim a page of due rows through the cursor and offer them to the queue.
    #[tracing::instrument(skip_all, fields(node = %self.shared.settings.node_id))]
    pub async fn round(&mut self) -> Result<Round, db::DbError> {
        let shared = &self.shared;
        shared.stats.rounds.fetch_add(1, Ordering::Relaxed);
        let mut round = Round::default();
        if shared.breaker_is_shut() {
            // Reading would only claim rows the workers must give back.
            round.skipped_by_breaker = true;
            return Ok(round);
        }
        let rows = {
            let mut conn = shared.pool.get().await?;
            db::uploads::sweep::claim_page(
                &mut conn,
                &shared.settings.node_id,
                self.cursor.after(),
                i64::from(self.cursor.page()),
                shared.settings.claim.as_secs_f64(),
            )
            .await?
        };
        round.read = rows.len();
        let last_read = rows.last().map(|r| r.id);
        let mut refused = Vec::new();
        for row in rows {
            if !refused.is_empty() {
                refused.push(row.id);
                continue;
            }
            let id = row.id;
            match self.queue.try_send(Work::Upload(row)) {
                Ok(()) => round.queued.push(id),
                Err(mpsc::error::TrySendError::Full(_)) => refused.push(id),
                Err(mpsc::error::TrySendError::Closed(_)) => refused.push(id),
            }
        }
        round.saturated = refused.len();
        let saturated_before = std::mem::replace(&mut self.saturated_before, !refused.is_empty());
        if !refused.is_empty() {
            shared
                .stats
                .saturated
                .fetch_add(refused.len() as u64, Ordering::Relaxed);
            // Said once when saturation starts, then per round at DEBUG: a long backlog would
            // otherwise write a WARN line every round.
            if saturated_before {
                tracing::debug!(refused = refused.len(), "sweeper queue still saturated");
            } else {
                tracing::warn!(
                    refused = refused.len(),
                    capacity = self.queue.max_capacity(),
                    "sweeper queue saturated; the rest of the page waits for a later round"
                );
            }
            let mut conn = shared.pool.get().await?;
            db::uploads::sweep::release(&mut conn, &refused).await?;
        }
        shared
            .stats
            .queued
            .fetch_add(round.queued.len() as u64, Ordering::SeqCst);
        self.cursor
            .advance(round.read, last_read, round.queued.last().copied());
        self.offer_files(&mut round).await?;
        Ok(round)
    }

    /// Expires presigned contracts past their deadline (deleting their objects) and this
    /// node's uploads through vidq that never finished arriving (removing their spool files).
    pub async fn expire(&self) -> Result<usize, db::DbError> {
        self.shared.expire().await
    }

    /// Deletes what the bucket is owed and due now (`db::doomed_objects`), as each round does;
    /// returns how many rows were paid.
    pub async fn pay_owed(&self) -> Result<usize, db::DbError> {
        self.shared.pay_doomed().await
    }

    /// One orphan pass now (the run loop starts one every `orphans_every`): deletes the
    /// objects no live row owns past the grace period, forgets the ledger rows of the ones it
    /// deleted, and forgets the `pending` artifact rows of dead attempts. One sweeper of the
    /// cluster at a time runs it (a session advisory lock); `None` when another one was.
    pub async fn clean_orphans(&self) -> Result<Option<OrphanPass>, AppError> {
        self.shared.clean_orphans().await
    }

    /// Runs no orphan pass until `allowed` turns `true` (the role's check of the bucket's
    /// deployment marker).
    pub fn hold_orphan_pass_until(&self, allowed: Arc<std::sync::atomic::AtomicBool>) {
        *self.shared.orphans_allowed.locked() = allowed;
    }

    /// Rounds until `shutdown`, then waits for the workers.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let interval = self.shared.settings.interval;
        let mut next_clean = self
            .shared
            .settings
            .orphans_every
            .map(|every| Instant::now() + every);
        let mut cleaning: Option<tokio::task::JoinHandle<()>> = None;
        while !shutdown.is_cancelled() {
            if let Some(at) = next_clean
                && Instant::now() >= at
                && cleaning.as_ref().is_none_or(|c| c.is_finished())
            {
                let shared = self.shared.clone();
                // Listing a large bucket takes a while: the rounds go on meanwhile.
                cleaning = Some(tokio::spawn(async move {
                    if let Err(error) = shared.clean_orphans().await {
                        tracing::warn!(error = %crate::telemetry::error_chain(&error), "orphan pass failed");
                    }
                }));
                next_clean = self.shared.settings.orphans_every.map(|every| at + every);
            }
            let round = self.round().await;
            self.shared.stats.round_ended(round.as_ref().err());
            let pause = match round {
                // A full page all queued: more may be waiting right behind it.
                Ok(r) if r.read == self.cursor.page() as usize && r.saturated == 0 => {
                    Duration::ZERO
                }
                Ok(_) => interval,
                Err(error) => {
                    tracing::warn!(error = %crate::telemetry::error_chain(&error), "sweeper round failed");
                    interval
                }
            };
            if let Err(error) = self.shared.end_recordings().await {
                tracing::warn!(error = %crate::telemetry::error_chain(&error), "ending idle recordings failed");
            }
            if let Err(error) = self.expire().await {
                tracing::warn!(error = %crate::telemetry::error_chain(&error), "expiring presigned uploads failed");
            }
            if let Err(error) = self.shared.pay_doomed().await {
                tracing::warn!(error = %crate::telemetry::error_chain(&error), "deleting what deletions left in the bucket failed");
            }
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(pause) => {}
                () = self.wake.notified() => {}
            }
        }
        self.stop().await;
    }

    /// Closes the queue and waits for the workers to finish what they hold.
    pub async fn stop(self) {
        drop(self.queue);
        let mut workers = self.workers;
        while workers.join_next().await.is_some() {}
    }
}
