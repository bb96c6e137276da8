//! `vidq bench sweeper`: the acceptance table with the real sweeper code against a
//! real PostgreSQL (a scratch database) and the in-process S3.
//!
//! Acceptance: P pending uploads through vidq (128 rows a round, queue 4,096 as the
//! acceptance table has it, not the product default) -> the round in which all P were accepted
//! into the queue, and the queue's saturation; 5 repetitions each; then the same with 1,000
//! rows whose PUT fails ahead of them (lower ids). Completion is measured separately (queued says nothing
//! about S3): the time from the first round until all P are confirmed (object in
//! S3 at the contracted key, contract confirmed, video, job and `video.accepted` committed).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::Scratch;
use super::stats::median;
use crate::adapters::spool::SpoolRoot;
use crate::adapters::storage::{ObjectHead, Storage, StorageError};
use crate::db::{self, DbPool};
use crate::domain::ids::{UploadId, UserId};
use crate::domain::keys;
use crate::domain::sweep::{Backoff, BreakerSettings};
use crate::sweeper::{SweepStore, Sweeper, SweeperSettings};
use crate::sync::Locked;

/// `vidq bench sweeper`.
#[derive(Debug, Args)]
pub struct SweeperBenchArgs {
    /// Pending uploads to accept (comma-separated; each is measured).
    #[arg(long, value_delimiter = ',', default_value = "128,1100,4096")]
    pub pending: Vec<usize>,
    /// Repetitions of each measurement.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Rows read per round.
    #[arg(long, default_value_t = 128)]
    pub page: u32,
    /// Queue capacity (the acceptance table uses 4,096; the product default is 256).
    #[arg(long, default_value_t = 4096)]
    pub queue: usize,
    /// Upload workers.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Rows whose PUT fails, placed ahead of the pending ones in the second table.
    #[arg(long, default_value_t = 1000)]
    pub failing: usize,
    /// Size of each spool file, in bytes.
    #[arg(long, default_value_t = 4096)]
    pub file_bytes: usize,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// The real S3 client with faults: PUTs of chosen keys fail at once; every PUT is counted
/// per key. Shared by the bench and the integration tests.
#[derive(Clone, Debug)]
pub struct FaultStore {
    inner: Storage,
    failing: Arc<Mutex<HashSet<String>>>,
    puts: Arc<Mutex<HashMap<String, u32>>>,
}

impl FaultStore {
    /// Wraps `inner`; nothing fails yet.
    pub fn new(inner: Storage) -> Self {
        Self {
            inner,
            failing: Arc::default(),
            puts: Arc::default(),
        }
    }

    /// PUTs of `key` fail from now on.
    pub fn fail_puts_of(&self, key: &str) {
        self.failing.locked().insert(key.to_owned());
    }

    /// PUTs of `key` work again.
    pub fn heal(&self, key: &str) {
        self.failing.locked().remove(key);
    }

    /// PUTs sent (failed ones included), per key.
    pub fn puts(&self) -> HashMap<String, u32> {
        self.puts.locked().clone()
    }

    /// PUTs sent in all.
    pub fn total_puts(&self) -> u32 {
        self.puts.locked().values().sum()
    }
}

impl SweepStore for FaultStore {
    async fn head(&self, key: &str) -> Result<Option<ObjectHead>, StorageError> {
        self.inner.head(key).await
    }

    async fn put_file(
        &self,
        key: &str,
        path: &Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<u64, StorageError> {
        *self.puts.locked().entry(key.to_owned()).or_default() += 1;
        if self.failing.locked().contains(key) {
            return Err(StorageError {
                op: "PutObject",
                key: key.to_owned(),
                source: Box::new(std::io::Error::other("injected PUT failure")),
                // This row's PUT is refused; S3 itself is up.
                outage: false,
            });
        }
        self.inner
            .put_file_tagged(key, path, content_type, sha256, cancel)
            .await
    }

    async fn list(
        &self,
        prefix: &str,
    ) -> Result<Vec<crate::adapters::storage::ListedObject>, StorageError> {
        self.inner.list_with_sizes(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }

    async fn open_multiparts(
        &self,
        prefix: &str,
    ) -> Result<Vec<crate::adapters::storage::OpenMultipart>, StorageError> {
        self.inner.open_multiparts(prefix).await
    }

    async fn abort_multipart(&self, key: &str, id: &str) -> Result<(), StorageError> {
        self.inner.abort_multipart(key, id).await
    }
}

/// Writes `count` spool files of `bytes` bytes under `root` and registers each as a
/// `pending` upload through vidq of `owner` on `node`, in id order; returns the ids.
pub async fn register_pending(
    pool: &DbPool,
    root: &Path,
    owner: UserId,
    node: &str,
    count: usize,
    bytes: usize,
) -> anyhow::Result<Vec<UploadId>> {
    let body = vec![0x5a_u8; bytes];
    let mut conn = pool.get().await?;
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        let id = UploadId::new();
        let relative = format!("{}.bin", id.0);
        tokio::fs::write(root.join(&relative), &body).await?;
        let size = i64::try_from(bytes)?;
        insert_pending_at(&mut conn, id, owner, node, &relative, size).await?;
        ids.push(id);
    }
    Ok(ids)
}

/// Registers a complete upload through vidq as a `pending` row of `node` whose spool path
/// is written as given (the file is the caller's business), as the ingest would.
pub async fn insert_pending_at(
    conn: &mut diesel_async::AsyncPgConnection,
    id: UploadId,
    owner: UserId,
    node: &str,
    spool_path: &str,
    size: i64,
) -> diesel::QueryResult<usize> {
    let key = keys::original(id);
    db::uploads::sweep::insert_pending(
        conn,
        &db::uploads::sweep::NewVidqUpload {
            contract: db::uploads::NewUploadRow {
                id,
                owner_id: owner,
                object_key: &key,
                filename: "clip.mp4",
                content_type: "video/mp4",
                declared_size: size,
                expires_at: chrono::Utc::now() + chrono::Duration::days(1),
                checksum: None,
                tus_metadata: None,
            },
            spool_path,
            node_id: node,
        },
    )
    .await
}

/// One measurement.
struct Sample {
    round: usize,
    saturation: usize,
    completed: Duration,
}

const NODE: &str = "bench-node";

/// Runs the benchmark and prints the tables.
pub async fn run(args: SweeperBenchArgs) -> anyhow::Result<()> {
    let scratch = Scratch::create(&args.server.database_url, "sweeper").await?;
    let result = measure_all(&args, &scratch.url).await;
    scratch.drop_now().await;
    result
}

async fn measure_all(args: &SweeperBenchArgs, url: &str) -> anyhow::Result<()> {
    let s3 = super::BenchS3::start().await?;
    let storage = s3.storage.clone();
    let pool = db::connect(url, u32::try_from(args.workers)? + 2).await?;
    let (owner, _) = crate::app::users::create_user(&pool, "bench").await?;

    println!(
        "vidq bench sweeper: {} rows a round, queue {}, {} upload workers, {} B files, real PostgreSQL + in-process S3",
        args.page, args.queue, args.workers, args.file_bytes
    );
    for failing in [0, args.failing] {
        println!();
        if failing == 0 {
            println!("Acceptance (no failing rows)");
        } else {
            println!("Acceptance with {failing} rows whose PUT fails ahead (lower ids, due)");
        }
        println!(
            "| pending | all accepted in round (each repetition) | repetitions | queue saturation | all confirmed in S3 after (median, max) |"
        );
        println!("|---|---|---|---|---|");
        for &pending in &args.pending {
            let mut samples = Vec::new();
            for _ in 0..args.repeat {
                samples.push(
                    measure(args, &pool, &storage, owner, pending, failing)
                        .await
                        .with_context(|| format!("{pending} pending, {failing} failing"))?,
                );
            }
            let rounds: Vec<String> = samples.iter().map(|s| s.round.to_string()).collect();
            let saturation: usize = samples.iter().map(|s| s.saturation).sum();
            let secs: Vec<f64> = samples.iter().map(|s| s.completed.as_secs_f64()).collect();
            let max = secs.iter().copied().fold(0.0, f64::max);
            println!(
                "| {pending} | {} | {} | {saturation} | {:.2} s, {:.2} s |",
                rounds.join(", "),
                samples.len(),
                median(&secs),
                max
            );
        }
    }
    s3.stop().await;
    Ok(())
}

async fn measure(
    args: &SweeperBenchArgs,
    pool: &DbPool,
    storage: &Storage,
    owner: UserId,
    pending: usize,
    failing: usize,
) -> anyhow::Result<Sample> {
    {
        let mut conn = pool.get().await?;
        db::bench::clear_uploads(&mut conn).await?;
    }
    let spool = tempfile::tempdir()?;
    let root = SpoolRoot::open(spool.path())?;
    let store = FaultStore::new(storage.clone());
    let bad = register_pending(pool, root.path(), owner, NODE, failing, args.file_bytes).await?;
    for id in &bad {
        store.fail_puts_of(&keys::original(*id));
    }
    let targets =
        register_pending(pool, root.path(), owner, NODE, pending, args.file_bytes).await?;
    let wanted: HashSet<UploadId> = targets.iter().copied().collect();

    let shutdown = CancellationToken::new();
    let settings = SweeperSettings {
        node_id: NODE.to_owned(),
        page: args.page,
        queue: args.queue,
        workers: args.workers,
        interval: Duration::ZERO,
        claim: Duration::from_secs(900),
        backoff: Backoff::default(),
        // Per-row failures are what this measures; a breaker opened by them would stop the
        // rounds and measure the breaker instead.
        breaker: BreakerSettings {
            failures_to_open: u32::MAX,
            cool_down: Duration::from_secs(30),
        },
        orphans_every: None,
        orphan_grace: Duration::from_secs(3600),
        live_idle: Duration::from_secs(30),
        live_waiting_ttl: Duration::from_secs(86_400),
        live_grace: Duration::from_secs(10),
    };
    let mut sweeper = Sweeper::start(pool.clone(), store, root, settings, shutdown.clone());
    let started = Instant::now();
    let mut accepted = HashSet::new();
    let mut saturation = 0;
    let mut round = 0;
    while accepted.len() < wanted.len() {
        round += 1;
        anyhow::ensure!(
            round <= 10_000,
            "not all rows were accepted after 10,000 rounds"
        );
        let r = sweeper.round().await?;
        saturation += r.saturated;
        accepted.extend(r.queued.into_iter().filter(|id| wanted.contains(id)));
    }
    let accepted_round = round;
    loop {
        let confirmed = {
            let mut conn = pool.get().await?;
            db::bench::confirmed_among(&mut conn, &targets).await?
        };
        if confirmed == targets.len() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "only {confirmed} of {} confirmed after 10 minutes",
            targets.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let completed = started.elapsed();
    shutdown.cancel();
    sweeper.stop().await;
    Ok(Sample {
        round: accepted_round,
        saturation,
        completed,
    })
}
