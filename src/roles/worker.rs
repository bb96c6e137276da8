//! The `worker` role: claims encoding jobs and runs the media pipeline on them. No public
//! port (an optional health listener on loopback), no migrations, no uploads or relay; a
//! pool of at most 2 connections, one more for heartbeats, and the idle line's connection.
//! Any number of workers on any number of hosts share one database.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::adapters::storage::Storage;
use crate::config::{MediaArgs, Secret, StorageConfig};
use crate::db;
use crate::pipeline::Pipeline;
use crate::queue::health::WorkerHealth;
use crate::queue::runner::{Runner, WorkerSettings};

/// Most connections a worker's pool holds (claims, heartbeats, finalizes share them).
pub const WORKER_POOL_SIZE: u32 = 2;

/// How a worker claims and paces jobs.
#[derive(Debug, Clone, Args)]
pub struct QueueArgs {
    /// Name written to each claim (`claimed_by`). Default: the host name.
    #[arg(long = "node-id", env = "VIDQ_NODE_ID", value_name = "NAME")]
    pub node_id: Option<String>,
    /// Jobs this process encodes at once (one FFmpeg per small node is the usual shape).
    #[arg(long, env = "VIDQ_SLOTS", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub slots: u32,
    /// Safety-net poll interval in milliseconds (NOTIFY wakes the worker sooner).
    #[arg(long = "poll-ms", env = "VIDQ_POLL_MS", value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub poll_ms: u64,
    /// Lease of a claim in seconds: a node that dies loses its job after this long.
    #[arg(long = "lease-secs", env = "VIDQ_LEASE_SECS", value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub lease_secs: u64,
    /// Lease renewal interval in seconds; 0 turns the heartbeat off (then set the lease to
    /// cover a whole attempt, e.g. 2100, as the seed did).
    #[arg(
        long = "heartbeat-secs",
        env = "VIDQ_HEARTBEAT_SECS",
        value_name = "SECS",
        default_value_t = 15
    )]
    pub heartbeat_secs: u64,
    /// Hard limit of one attempt in seconds (default 35 min = 3 FFmpeg calls x 10 min + 5 min S3).
    #[arg(long = "deadline-secs", env = "VIDQ_DEADLINE_SECS", value_name = "SECS", default_value_t = 2100,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub deadline_secs: u64,
    /// Scratch space for originals and outputs (one directory per attempt, removed after).
    #[arg(long = "work-dir", env = "VIDQ_WORK_DIR", value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

impl QueueArgs {
    /// Checks the combination and builds the settings.
    pub fn settings(&self) -> anyhow::Result<WorkerSettings> {
        if self.heartbeat_secs > 0 && self.heartbeat_secs * 2 > self.lease_secs {
            bail!(
                "VIDQ_HEARTBEAT_SECS ({}) must be at most half of VIDQ_LEASE_SECS ({}), so one missed renewal does not lose the claim",
                self.heartbeat_secs,
                self.lease_secs
            );
        }
        Ok(WorkerSettings {
            node_id: self.node_id.clone().unwrap_or_else(|| {
                super::host_name().unwrap_or_else(|| format!("worker-{}", std::process::id()))
            }),
            slots: self.slots,
            poll: Duration::from_millis(self.poll_ms),
            lease: Duration::from_secs(self.lease_secs),
            heartbeat: (self.heartbeat_secs > 0).then(|| Duration::from_secs(self.heartbeat_secs)),
            deadline: Duration::from_secs(self.deadline_secs),
            retry_delay: crate::app::jobs::RETRY_DELAY,
            listeners: crate::queue::line::Listeners::HeadOfLine,
        })
    }
}

/// Settings of the `worker` role.
#[derive(Debug, Clone, Args)]
#[allow(missing_docs)] // flattened groups are documented on their own types
pub struct WorkerConfig {
    /// PostgreSQL URL.
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Secret,
    #[command(flatten)]
    pub queue: QueueArgs,
    /// Serve `/healthz` and `/metrics` on this loopback address (e.g. 127.0.0.1:9091). Off
    /// by default; only loopback addresses are accepted.
    #[arg(long = "health-listen", env = "VIDQ_HEALTH_LISTEN", value_name = "ADDR",
          value_parser = crate::http::worker_health::loopback_addr)]
    pub health_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub storage: StorageConfig,
    #[command(flatten)]
    pub media: MediaArgs,
}

/// Runs a worker until `shutdown`.
pub async fn run(config: WorkerConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let storage = Storage::connect(&config.storage, None).await;
    let health = Arc::new(WorkerHealth::default());
    if let Some(addr) = config.health_listen {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} (VIDQ_HEALTH_LISTEN)"))?;
        let server = crate::http::worker_health::serve(
            listener,
            health.clone(),
            config.queue.slots,
            Duration::from_millis(config.queue.poll_ms),
            shutdown.clone(),
        )?;
        tracing::info!(%addr, "health listener on /healthz and /metrics");
        tokio::spawn(server);
    }
    run_with(
        config.database_url.expose(),
        &config.queue,
        &config.media,
        storage,
        health,
        shutdown,
    )
    .await
}

/// Runs a worker with a storage client already built (`vidq dev` passes the embedded S3's).
pub async fn run_with(
    database_url: &str,
    queue: &QueueArgs,
    media: &MediaArgs,
    storage: Storage,
    health: Arc<WorkerHealth>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let settings = queue.settings()?;
    let pool = db::connect(database_url, WORKER_POOL_SIZE)
        .await
        .context("connecting to the database (DATABASE_URL)")?;
    let work_root = match &queue.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir(),
    };
    std::fs::create_dir_all(&work_root)
        .with_context(|| format!("creating {} (VIDQ_WORK_DIR)", work_root.display()))?;
    remove_stale_scratch(&work_root);
    // Checked now, so a host without a parent-death signal says so at start.
    crate::adapters::ffmpeg::process::parent_death();
    let body = Pipeline {
        storage,
        db: pool.clone(),
        media: media.to_media_config(),
        work_root,
    };
    let runner = Arc::new(Runner {
        pool,
        database_url: database_url.to_owned(),
        body: Arc::new(body),
        settings,
        on_claim: None,
        health,
    });
    runner.run(shutdown).await;
    Ok(())
}

/// Removes the scratch directories a killed worker left under `root` (those of running
/// workers are locked and kept). A failure here costs disk space, not correctness: logged.
fn remove_stale_scratch(root: &std::path::Path) {
    match crate::pipeline::scratch::remove_stale(root) {
        Ok(removed) if removed.is_empty() => {}
        Ok(removed) => {
            tracing::info!(count = removed.len(), root = %root.display(), "removed stale scratch directories");
        }
        Err(error) => {
            tracing::warn!(%error, root = %root.display(), "could not remove stale scratch directories");
        }
    }
}
