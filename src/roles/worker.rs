//! The `worker` role: claims encoding jobs and runs the media pipeline on them. No public
//! port (an optional health listener on loopback), no migrations, no uploads or relay; a
//! pool of at most 2 connections, one more for heartbeats, and the idle line's connection.
//! Any number of workers on any number of hosts share one database.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::adapters::storage::Storage;
use crate::config::MediaArgs;
pub use crate::config::{QueueArgs, WorkerConfig};
use crate::db;
use crate::pipeline::{AttemptWaits, Pipeline};
use crate::queue::runner::{Runner, WorkerSettings};
use crate::telemetry::worker_health::WorkerHealth;

/// Most connections a worker's pool holds (claims, ledger writes and finalizes share them;
/// heartbeats have one connection of their own).
pub const WORKER_POOL_SIZE: u32 = 2;

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
            retry_delay: crate::queue::complete::RETRY_DELAY,
            listeners: crate::queue::line::Listeners::HeadOfLine,
            tool_failures: self.tool_failures,
            tool_recheck: Duration::from_secs(self.tool_recheck_secs),
        })
    }
}

/// Runs a worker until `shutdown`.
pub async fn run(config: WorkerConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let storage = Storage::connect(&config.storage, None).await;
    let health = Arc::new(WorkerHealth::default());
    if let Some(addr) = config.health_listen {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} (VIDQ_HEALTH_LISTEN)"))?;
        let health = crate::http::health_listener::WorkerHealthReport::new(
            health.clone(),
            config.queue.slots,
            Duration::from_millis(config.queue.poll_ms),
        );
        let server =
            crate::http::health_listener::serve(listener, Arc::new(health), shutdown.clone())?;
        tracing::info!(%addr, "health listener on /healthz and /metrics");
        tokio::spawn(server);
    }
    run_with(
        config.database.url.expose(),
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
    let media = crate::adapters::ffmpeg::MediaConfig::from(media);
    media
        .split
        .check()
        .map_err(|reason| anyhow::anyhow!("this worker cannot split long videos: {reason}"))?;
    // Both job kinds (encode, repackage) need the same tools, scratch space and S3; a worker
    // that lacks one says so now, in one sentence, rather than failing each job it claims.
    media.check_tools().await.context(
        "this worker cannot encode or repackage: the media tools do not run (VIDQ_FFMPEG, \
         VIDQ_FFPROBE; is FFmpeg installed?)",
    )?;
    let pool = db::connect(database_url, WORKER_POOL_SIZE)
        .await
        .context("connecting to the database (DATABASE_URL)")?;
    super::claim_namespace(&storage, &pool, &shutdown).await?;
    let work_root = match &queue.work_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir(),
    };
    crate::pipeline::scratch::check_writable(&work_root).with_context(|| {
        format!(
            "this worker cannot encode or repackage: its scratch directory {} (VIDQ_WORK_DIR) \
             is not writable",
            work_root.display()
        )
    })?;
    remove_stale_scratch(&work_root);
    warn_while_storage_is_down(&storage, &shutdown);
    // Checked now, so a host without a parent-death signal says so at start.
    crate::adapters::ffmpeg::process::parent_death();
    let body = Pipeline {
        storage,
        db: pool.clone(),
        media,
        work_root,
        waits: AttemptWaits::default(),
    };
    let running = health.clone();
    super::presence::spawn(
        pool.clone(),
        super::presence::Presence {
            role: "worker",
            node_id: settings.node_id.clone(),
            slots: queue.slots,
            detail: Arc::new(move || match running.tools_broken() {
                None => serde_json::json!({ "running": running.running() }),
                Some(reason) => serde_json::json!({
                    "running": running.running(),
                    "health": format!("unhealthy: media tools fail, not claiming ({reason})"),
                }),
            }),
        },
        shutdown.child_token(),
    );
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

/// Starts without S3 (a worker needs it only once it has a job): says so once in a WARN and
/// once more when S3 answers. Jobs claimed meanwhile wait for S3 within their attempt, then
/// go back to the queue.
fn warn_while_storage_is_down(storage: &Storage, shutdown: &CancellationToken) {
    tokio::spawn(crate::adapters::storage_watch::watch(
        storage.clone(),
        "jobs claimed meanwhile wait for it, then go back to the queue",
        shutdown.child_token(),
    ));
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
