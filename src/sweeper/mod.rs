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

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::adapters::spool::{SpoolCheck, SpoolRoot};
use crate::adapters::storage::{ListedObject, ObjectHead, Storage, StorageError};
use crate::app::AppError;
use crate::config::SweeperArgs;
use crate::db::{self, DbPool, ledger::ClaimedUpload, recordings::ClaimedFile};
use crate::domain::ids::{UploadId, UserId};
use crate::domain::sweep::{Admission, Backoff, Breaker, BreakerSettings, Cursor, Transition};
use crate::domain::upload::RejectReason;

mod files;
pub mod probe;

/// The row a worker holds, in whichever ledger it is.
#[derive(Clone, Copy, Debug)]
enum Held {
    /// `uploads.id`.
    Upload(Uuid),
    /// `recording_files.id`.
    File(i64),
}

/// What the queue carries to the upload workers: a row of either ledger.
#[derive(Debug)]
enum Work {
    /// An upload through vidq (confirmed into a video once in S3).
    Upload(ClaimedUpload),
    /// A live recording's init or segment.
    File(ClaimedFile),
}

/// Presigned contracts expired per statement.
const EXPIRE_BATCH: i64 = 256;

/// The session advisory lock one sweeper holds while it runs the orphan pass.
pub const ORPHAN_PASS_LOCK: i64 = 7_271_015;

/// What one orphan pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanPass {
    /// Objects listed under `originals/` and `videos/`.
    pub objects: usize,
    /// Orphans deleted (past the grace period).
    pub deleted: usize,
    /// Dead attempts' `pending` artifact rows forgotten.
    pub dead_pending_rows: usize,
    /// Objects no row owns that are younger than the grace period (left alone).
    pub young: usize,
}

/// The S3 calls the sweeper makes, so tests and `vidq bench sweeper` can wrap the real
/// client (count PUTs, fail some) without changing the code under test.
pub trait SweepStore: Clone + Send + Sync + 'static {
    /// The object's size, or `None`.
    fn head(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<ObjectHead>, StorageError>> + Send;
    /// PUTs a file (multipart when large), stored with its `sha256` when given (see
    /// [`ObjectHead::sha256`]); the byte count sent.
    fn put_file(
        &self,
        key: &str,
        path: &Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<u64, StorageError>> + Send;
    /// Deletes an object (absent is fine).
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StorageError>> + Send;
    /// Every object under `prefix`, with its size and age (the orphan pass).
    fn list(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<ListedObject>, StorageError>> + Send;
}

impl SweepStore for Storage {
    async fn head(&self, key: &str) -> Result<Option<ObjectHead>, StorageError> {
        Storage::head(self, key).await
    }
    async fn put_file(
        &self,
        key: &str,
        path: &Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<u64, StorageError> {
        self.put_file_tagged(key, path, content_type, sha256, cancel)
            .await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        Storage::delete(self, key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ListedObject>, StorageError> {
        self.list_with_sizes(prefix).await
    }
}

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

/// Counters of one sweeper (tracing logs them; metrics are another issue).
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
    fn round_ended(&self, error: Option<&db::DbError>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.last_round_unix_ms.store(now, Ordering::Relaxed);
        *self.round_error.lock().expect("round error") =
            error.map(|e| crate::telemetry::error_chain(e));
    }

    /// Whether every queued row has been dealt with (the queue is empty and no worker
    /// holds a row).
    pub fn settled(&self) -> bool {
        self.done.load(Ordering::SeqCst) == self.queued.load(Ordering::SeqCst)
    }
}

/// What one round did.
#[derive(Debug, Default)]
pub struct Round {
    /// Rows read (and claimed).
    pub read: usize,
    /// Ids the queue took, in id order.
    pub queued: Vec<Uuid>,
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
}

/// A running sweeper: the reader side ([`Sweeper::round`]) and its upload workers.
pub struct Sweeper<S: SweepStore> {
    shared: Arc<Shared<S>>,
    cursor: Cursor<Uuid>,
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
    pub fn probe(&self) -> probe::SweeperProbe {
        probe::SweeperProbe {
            stats: self.shared.stats.clone(),
            breaker: self.shared.breaker.clone(),
            stall: self.shared.settings.interval * 3 + Duration::from_secs(10),
        }
    }

    /// What starts a round early (the role ticks it on every `vidq_sweep` NOTIFY).
    pub fn waker(&self) -> Arc<tokio::sync::Notify> {
        self.wake.clone()
    }

    /// Rows waiting in the queue.
    pub fn queued_now(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
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
            db::ledger::claim_page(
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
            db::ledger::release(&mut conn, &refused).await?;
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

    /// One orphan pass now (the run loop starts one every `orphans_every`): deletes the
    /// objects no live row owns past the grace period, forgets the ledger rows of the ones it
    /// deleted, and forgets the `pending` artifact rows of dead attempts. One sweeper of the
    /// cluster at a time runs it (a session advisory lock); `None` when another one was.
    pub async fn clean_orphans(&self) -> Result<Option<OrphanPass>, AppError> {
        self.shared.clean_orphans().await
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

/// S3 holds a row's object: whether this try PUT it (or found it by HEAD), and the size S3
/// holds.
struct Landed {
    put: bool,
    size: i64,
    /// The digest S3 holds the object with (`None`: stored without one).
    sha256: Option<String>,
}

/// What one row puts where: the object key, the spool file, the ledger's size and digest,
/// and the `Content-Type` to store.
struct Landing<'a> {
    key: &'a str,
    path: &'a Path,
    size: i64,
    /// When the ledger holds a digest, S3 must hold the object with that digest (not just
    /// that size) for the PUT to be skipped, and what S3 holds after the PUT is read back.
    sha256: Option<&'a str>,
    content_type: &'a str,
}

/// How one row ended, for the counters and the log.
#[derive(Debug)]
enum Outcome {
    Confirmed,
    AlreadyClosed,
    Rejected,
    Failed,
    HeldByBreaker,
    Stopped,
}

impl<S: SweepStore> Shared<S> {
    /// An upload worker: rows off the queue until it closes; after `shutdown`, rows still
    /// queued are released instead of PUT.
    async fn work(
        &self,
        rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Work>>>,
        shutdown: CancellationToken,
    ) {
        loop {
            let work = {
                let mut rx = rx.lock().await;
                tokio::select! {
                    work = rx.recv() => work,
                    () = shutdown.cancelled() => rx.try_recv().ok(),
                }
            };
            let Some(work) = work else { return };
            match work {
                Work::Upload(row) if shutdown.is_cancelled() => {
                    self.release(Held::Upload(row.id)).await
                }
                Work::Upload(row) => {
                    let outcome = self.upload(&row, &shutdown).await;
                    tracing::debug!(upload_id = %row.id, ?outcome, "sweeper row done");
                }
                Work::File(file) if shutdown.is_cancelled() => {
                    self.release(Held::File(file.id)).await
                }
                Work::File(file) => {
                    let outcome = self.upload_file(&file, &shutdown).await;
                    tracing::debug!(file_id = file.id, ?outcome, "sweeper recording file done");
                }
            }
            self.stats.done.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn breaker_is_shut(&self) -> bool {
        let breaker = self.breaker.lock().expect("breaker lock");
        // Open and still cooling down: a probe would be refused too.
        let mut probe = breaker.clone();
        matches!(probe.admit(Instant::now()), Admission::Refused)
    }

    fn note(&self, transition: Option<Transition>) {
        if let Some(t) = transition {
            self.stats
                .breaker_transitions
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                from = t.from.as_str(),
                to = t.to.as_str(),
                "sweeper circuit breaker changed state"
            );
        }
    }

    /// One row, from the file boundary to the confirm.
    #[tracing::instrument(skip_all, fields(upload_id = %row.id))]
    async fn upload(&self, row: &ClaimedUpload, cancel: &CancellationToken) -> Outcome {
        let file = match self.root.check(row.spool_path.as_deref()) {
            SpoolCheck::File { path, size } => {
                if i64::try_from(size).ok() != Some(row.declared_size) {
                    return self
                        .reject(
                            Held::Upload(row.id),
                            row.spool_path.as_deref(),
                            RejectReason::SpoolSizeMismatch,
                        )
                        .await;
                }
                path
            }
            SpoolCheck::Refused(reason) => {
                return self
                    .reject(Held::Upload(row.id), row.spool_path.as_deref(), reason)
                    .await;
            }
            SpoolCheck::Unreadable(error) => {
                return self
                    .fail(
                        Held::Upload(row.id),
                        row.tries,
                        &format!("spool file unreadable: {error}"),
                    )
                    .await;
            }
        };
        let landed = self
            .land(
                Held::Upload(row.id),
                row.tries,
                Landing {
                    key: &row.object_key,
                    path: &file,
                    size: row.declared_size,
                    sha256: None,
                    content_type: &row.content_type,
                },
                cancel,
            )
            .await;
        match landed {
            Ok(landed) => self.confirm(row, &file, landed.put).await,
            Err(outcome) => outcome,
        }
    }

    /// From the breaker's admission to S3 holding `key` with `size` bytes, for a row of
    /// either ledger. The PUT may have landed before a crash (or its answer was lost): the
    /// same key with the right size needs no second PUT, and there is never a second key.
    /// `Err` is how the row ended otherwise (held by the breaker, stopped, failed), the row
    /// already given back or backed off.
    #[allow(clippy::too_many_arguments)]
    async fn land(
        &self,
        row: Held,
        tries: i32,
        landing: Landing<'_>,
        cancel: &CancellationToken,
    ) -> Result<Landed, Outcome> {
        let Landing {
            key,
            path,
            size,
            sha256,
            content_type,
        } = landing;
        let admission = self
            .breaker
            .lock()
            .expect("breaker lock")
            .admit(Instant::now());
        match admission {
            Admission::Allowed => {}
            Admission::Probe(t) => self.note(Some(t)),
            Admission::Refused => {
                self.stats.held_by_breaker.fetch_add(1, Ordering::Relaxed);
                self.release(row).await;
                return Err(Outcome::HeldByBreaker);
            }
        }
        let landed = match self.store.head(key).await {
            // Already there: the same size, and the same digest when the ledger has one
            // (bytes of the same length can differ: a file sent again with other content).
            Ok(Some(head))
                if head.size == size && (sha256.is_none() || head.sha256.as_deref() == sha256) =>
            {
                self.stats.found_by_head.fetch_add(1, Ordering::Relaxed);
                Landed {
                    put: false,
                    size: head.size,
                    sha256: head.sha256,
                }
            }
            Ok(_) => {
                self.stats.puts.fetch_add(1, Ordering::Relaxed);
                match self
                    .store
                    .put_file(key, path, content_type, sha256, cancel)
                    .await
                {
                    Ok(sent) if sha256.is_none() => Landed {
                        put: true,
                        size: i64::try_from(sent).unwrap_or(i64::MAX),
                        sha256: None,
                    },
                    // What S3 holds now, not what this PUT sent: another PUT of the key
                    // may have finished after this one.
                    Ok(_) => match self.store.head(key).await {
                        Ok(Some(head)) => Landed {
                            put: true,
                            size: head.size,
                            sha256: head.sha256,
                        },
                        Ok(None) => {
                            let error = StorageError {
                                op: "HeadObject",
                                key: key.to_owned(),
                                source: Box::new(std::io::Error::other(
                                    "the object is missing right after its PUT",
                                )),
                                outage: false,
                            };
                            return Err(self.storage_failed(row, tries, &error).await);
                        }
                        Err(error) => return Err(self.storage_failed(row, tries, &error).await),
                    },
                    // Stopped by a shutdown, not failed by S3: the row is given back as it
                    // was (no try counted, the breaker untouched).
                    Err(_) if cancel.is_cancelled() => {
                        self.release(row).await;
                        return Err(Outcome::Stopped);
                    }
                    Err(error) => return Err(self.storage_failed(row, tries, &error).await),
                }
            }
            Err(error) => return Err(self.storage_failed(row, tries, &error).await),
        };
        let transition = self.breaker.lock().expect("breaker lock").on_success();
        self.note(transition);
        Ok(landed)
    }

    /// The confirm's one transaction (upload CAS, video, job, `video.accepted`).
    async fn confirm(&self, row: &ClaimedUpload, file: &Path, put: bool) -> Outcome {
        let owner = UserId(row.owner_id);
        let upload = UploadId(row.id);
        let key = row.object_key.clone();
        let accepted = async {
            let mut conn = self.pool.get().await.map_err(db::DbError::from)?;
            crate::app::uploads::accept(&mut conn, owner, upload, &key).await
        }
        .await;
        match accepted {
            Ok(accepted) => {
                if accepted.is_some() {
                    self.stats.confirmed.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(put, "upload through vidq landed in S3 and confirmed");
                }
                // The bytes are in S3 and the contract is closed: the spool copy is done.
                if let Err(error) = tokio::fs::remove_file(file).await {
                    tracing::warn!(%error, "could not remove the spool file");
                }
                if accepted.is_some() {
                    Outcome::Confirmed
                } else {
                    Outcome::AlreadyClosed
                }
            }
            Err(AppError::UploadClosed { state }) => {
                tracing::info!(%state, "upload closed before the sweeper confirmed it");
                Outcome::AlreadyClosed
            }
            Err(error) => {
                self.fail(
                    Held::Upload(row.id),
                    row.tries,
                    &format!("confirm failed: {}", crate::telemetry::error_chain(&error)),
                )
                .await
            }
        }
    }

    /// A failed S3 call: the row backs off; the breaker counts it only when S3 itself is
    /// failing (no answer, a 5xx, a 429). S3 refusing this one request (a 4xx) shows S3 is
    /// up, so one bad row cannot stop the uploads of every other.
    async fn storage_failed(&self, row: Held, tries: i32, error: &StorageError) -> Outcome {
        let transition = {
            let mut breaker = self.breaker.lock().expect("breaker lock");
            if error.outage {
                breaker.on_failure(Instant::now())
            } else {
                breaker.on_success()
            }
        };
        self.note(transition);
        self.fail(row, tries, &crate::telemetry::error_chain(error))
            .await
    }

    /// Stores the failure and the row's next try on the row (`tries` failed so far).
    async fn fail(&self, row: Held, tries: i32, error: &str) -> Outcome {
        self.stats.failed.fetch_add(1, Ordering::Relaxed);
        let failures = u32::try_from(tries).unwrap_or(0).saturating_add(1);
        let delay = self.settings.backoff.delay(failures, rand::random::<f64>());
        tracing::info!(
            ?row,
            failures,
            delay_ms = delay.as_millis() as u64,
            error,
            "upload try failed; backing off"
        );
        let secs = delay.as_secs_f64();
        let stored = async {
            let mut conn = self.pool.get().await?;
            match row {
                Held::Upload(id) => db::ledger::record_failure(&mut conn, id, secs, error).await,
                Held::File(id) => {
                    db::recordings::record_file_failure(&mut conn, id, secs, error).await
                }
            }
            .map_err(db::DbError::from)
        }
        .await;
        if let Err(error) = stored {
            // The claim lapses on its own; the row is tried again then.
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not record the failed try");
        }
        Outcome::Failed
    }

    /// Refuses the row for good (never PUT, never tried again).
    async fn reject(&self, row: Held, spool_path: Option<&str>, reason: RejectReason) -> Outcome {
        let stored = async {
            let mut conn = self.pool.get().await?;
            match row {
                Held::Upload(id) => db::ledger::reject(&mut conn, id, reason).await,
                Held::File(id) => {
                    let path = spool_path.unwrap_or_default();
                    db::recordings::reject_file(&mut conn, id, path, reason).await
                }
            }
            .map_err(db::DbError::from)
        }
        .await;
        match stored {
            // A recording file sent again since the claim: its row names the new version,
            // which the next claim checks. The refused one was this claim's, not the row's.
            Ok(0) if matches!(row, Held::File(_)) => {
                tracing::debug!(
                    ?row,
                    "a file sent again replaced the one refused; not rejected"
                );
                self.release(row).await;
                return Outcome::AlreadyClosed;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not record the rejection");
            }
        }
        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(?row, reason = reason.as_str(), spool_path = ?spool_path, "rejected at the file boundary");
        Outcome::Rejected
    }

    /// Gives the claim back without a try.
    async fn release(&self, row: Held) {
        let released = async {
            let mut conn = self.pool.get().await?;
            match row {
                Held::Upload(id) => db::ledger::release(&mut conn, &[id]).await,
                Held::File(id) => db::recordings::release_files(&mut conn, &[id]).await,
            }
            .map_err(db::DbError::from)
        }
        .await;
        if let Err(error) = released {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not release a claim");
        }
    }

    async fn clean_orphans(&self) -> Result<Option<OrphanPass>, AppError> {
        let mut conn = self.pool.get().await?;
        if !db::session::try_advisory_lock(&mut conn, ORPHAN_PASS_LOCK).await? {
            tracing::debug!("another sweeper runs the orphan pass");
            return Ok(None);
        }
        let pass = self.orphan_pass(&mut conn).await;
        // The lock is the session's: give it back before the connection returns to the pool.
        if let Err(error) = db::session::advisory_unlock(&mut conn, ORPHAN_PASS_LOCK).await {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not release the orphan pass lock");
        }
        pass.map(Some)
    }

    async fn orphan_pass(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
    ) -> Result<OrphanPass, AppError> {
        let started = Instant::now();
        let grace = self.settings.orphan_grace;
        // The ledger first, then the listing (see `app::reconcile`).
        let snapshot = db::reconcile::snapshot(conn).await?;
        let mut objects = Vec::new();
        for prefix in crate::app::reconcile::PREFIXES {
            let listed = self.store.list(prefix).await?;
            objects.extend(
                listed
                    .into_iter()
                    .map(crate::domain::reconcile::BucketObject::from),
            );
        }
        let report = crate::app::reconcile::compare_snapshot(
            &snapshot,
            &objects,
            chrono::Utc::now(),
            grace.as_secs(),
        )?;
        let mut deleted = Vec::new();
        for orphan in report
            .differences
            .iter()
            .filter(|d| d.kind == crate::domain::reconcile::Kind::Orphan)
        {
            match self.store.delete(&orphan.key).await {
                Ok(()) => {
                    tracing::info!(key = %orphan.key, reason = %orphan.reason, "orphan object deleted");
                    deleted.push(orphan.key.clone());
                }
                Err(error) => {
                    tracing::warn!(key = %orphan.key, error = %crate::telemetry::error_chain(&error), "could not delete an orphan object");
                }
            }
        }
        db::artifacts::forget_keys(conn, &deleted).await?;
        let forgotten = db::artifacts::forget_dead_pending(conn, grace.as_secs_f64()).await?;
        self.stats
            .orphans_deleted
            .fetch_add(deleted.len() as u64, Ordering::Relaxed);
        self.stats
            .dead_pending_forgotten
            .fetch_add(forgotten as u64, Ordering::Relaxed);
        let pass = OrphanPass {
            objects: objects.len(),
            deleted: deleted.len(),
            dead_pending_rows: forgotten,
            young: report.young,
        };
        tracing::info!(
            listed = pass.objects,
            deleted = pass.deleted,
            dead_pending_rows = pass.dead_pending_rows,
            young = pass.young,
            ms = started.elapsed().as_millis() as u64,
            "orphan pass done"
        );
        Ok(pass)
    }

    async fn expire(&self) -> Result<usize, db::DbError> {
        let unfinished = {
            let mut conn = self.pool.get().await?;
            db::ingest::expire_receiving(&mut conn, &self.settings.node_id, EXPIRE_BATCH).await?
        };
        for row in &unfinished {
            if let Some(path) = row.spool_path.as_deref()
                && let Err(error) = self.root.remove(path).await
            {
                tracing::warn!(upload_id = %row.id, error = %crate::telemetry::error_chain(&error), "could not remove an expired upload's spool file");
            }
        }
        if !unfinished.is_empty() {
            self.stats
                .expired
                .fetch_add(unfinished.len() as u64, Ordering::Relaxed);
            tracing::info!(
                count = unfinished.len(),
                "expired uploads through vidq that never finished arriving"
            );
        }
        let expired = {
            let mut conn = self.pool.get().await?;
            db::ledger::expire_presigned(&mut conn, EXPIRE_BATCH).await?
        };
        for row in &expired {
            // The contract is closed first, so no confirm can turn this object into a video
            // once it is gone. A failed delete leaves an orphan for `vidq reconcile`.
            if let Err(error) = self.store.delete(&row.object_key).await {
                tracing::warn!(upload_id = %row.id, error = %crate::telemetry::error_chain(&error), "could not delete an expired upload's object");
            }
        }
        if !expired.is_empty() {
            self.stats
                .expired
                .fetch_add(expired.len() as u64, Ordering::Relaxed);
            tracing::info!(
                count = expired.len(),
                "expired presigned uploads never confirmed"
            );
        }
        Ok(expired.len() + unfinished.len())
    }
}
