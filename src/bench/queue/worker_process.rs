//! The throughput run's workers as processes of their own: `vidq bench queue-worker`, a
//! worker as `vidq worker` runs it (its settings from the same flags and `VIDQ_*` variables,
//! heartbeats on, its presence row, a pool of its own) with a job body that does nothing, and
//! the parent's side that starts N of them and counts their READY finalizes.
//!
//! A child connects only when the parent says go (a line on its stdin), so the parent's clock
//! starts before the runners connect, as the peer's does; it prints one line per READY
//! finalize, and when stopped (SIGTERM) one last line with its finalize batches.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use futures_util::future::BoxFuture;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::workers::Noop;
use crate::config::QueueArgs;
use crate::db;
use crate::domain::ids::VideoId;
use crate::domain::media::MediaError;
use crate::pipeline::{AttemptPlan, Attempted};
use crate::queue::JobBody;
use crate::queue::runner::Runner;
use crate::sync::Locked;
use crate::telemetry::worker_health::WorkerHealth;

/// What a child prints for each READY finalize.
const READY_LINE: &str = "ready";
/// The child's last line: `batches COUNT FINALIZES`, its batched finalize commits and the
/// finalizes they carried.
const BATCHES_PREFIX: &str = "batches ";

/// `vidq bench queue-worker` (started by `vidq bench queue`, not by hand).
#[derive(Debug, clap::Args)]
pub struct QueueWorkerArgs {
    /// The scratch database to drain.
    #[arg(long = "database-url", value_name = "URL")]
    pub database_url: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub queue: QueueArgs,
}

/// A body that succeeds at once and prints a line for each READY commit.
struct Announcing;

impl JobBody for Announcing {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Attempted, MediaError>> {
        super::workers::succeed_at_once(plan)
    }

    fn after_ready(&self, _: VideoId, _: i32, _: i32, _: Vec<String>) -> BoxFuture<'_, ()> {
        Box::pin(async move { println!("{READY_LINE}") })
    }
}

/// The child: waits for the go, runs until SIGTERM, reports its batches.
pub async fn run_child(args: QueueWorkerArgs) -> anyhow::Result<()> {
    let settings = args.queue.settings()?;
    let mut go = String::new();
    BufReader::new(tokio::io::stdin())
        .read_line(&mut go)
        .await
        .context("waiting for the go")?;
    let pool = db::connect(&args.database_url, crate::roles::worker::WORKER_POOL_SIZE).await?;
    let shutdown = crate::shutdown::on_signals();
    crate::roles::presence::spawn(
        pool.clone(),
        crate::roles::presence::Presence {
            role: "worker",
            node_id: settings.node_id.clone(),
            slots: settings.slots,
            detail: Arc::new(|| serde_json::json!({ "bench": true })),
        },
        shutdown.child_token(),
    );
    let runner = Arc::new(Runner {
        pool,
        database_url: args.database_url.clone(),
        body: Arc::new(Announcing),
        settings,
        on_claim: None,
        health: Arc::new(WorkerHealth::default()),
    });
    runner.run(shutdown).await;
    let batches = &crate::metrics::FINALIZE_BATCH_SIZE;
    println!(
        "{BATCHES_PREFIX}{} {}",
        batches.get_sample_count(),
        batches.get_sample_sum()
    );
    Ok(())
}

/// `workers` slots as processes of `slots` each, started and told to go; returns when they
/// have made `target` videos READY between them: the time from the go, and READY finalizes
/// per finalize commit.
pub(super) async fn drain_with_processes(
    url: &str,
    workers: u32,
    slots: u32,
    target: usize,
) -> anyhow::Result<(std::time::Duration, f64)> {
    let slots = slots.clamp(1, workers.max(1));
    let mut children: Vec<Child> = Vec::new();
    for n in 0..workers.div_ceil(slots) {
        let own = slots.min(workers - n * slots);
        let child = Command::new(std::env::current_exe()?)
            .args(["bench", "queue-worker", "--database-url", url])
            .args([
                "--node-id",
                &format!("bench-{n}"),
                "--slots",
                &own.to_string(),
            ])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a queue worker process")?;
        children.push(child);
    }
    let counted = Arc::new(Noop {
        ready: AtomicUsize::new(0),
        target,
        reached: Notify::new(),
    });
    let batches = Arc::new(std::sync::Mutex::new((0.0, 0.0)));
    let mut readers = Vec::new();
    for child in &mut children {
        let stdout = child.stdout.take().context("a child's stdout")?;
        let (counted, batches) = (counted.clone(), batches.clone());
        readers.push(tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line == READY_LINE {
                    if counted.ready.fetch_add(1, Ordering::SeqCst) + 1 == counted.target {
                        counted.reached.notify_one();
                    }
                } else if let Some(rest) = line.strip_prefix(BATCHES_PREFIX) {
                    let mut numbers = rest.split(' ').filter_map(|n| n.parse::<f64>().ok());
                    if let (Some(count), Some(sum)) = (numbers.next(), numbers.next()) {
                        let mut total = batches.locked();
                        total.0 += count;
                        total.1 += sum;
                    }
                }
            }
        }));
    }
    let started = Instant::now();
    for child in &mut children {
        let mut stdin = child.stdin.take().context("a child's stdin")?;
        stdin.write_all(b"go\n").await?;
    }
    let reached = counted.reached.notified();
    tokio::select! {
        () = reached => {}
        () = all_exited(&mut children) => bail!("the queue worker processes exited before the drain ended"),
    }
    let elapsed = started.elapsed();
    crate::bench::e2e::stop_workers(children).await;
    for reader in readers {
        let _ = reader.await;
    }
    let ready = counted.ready.load(Ordering::SeqCst) as f64;
    let (batches, batched) = *batches.locked();
    let transactions = batches + (ready - batched);
    Ok((elapsed, ready / transactions.max(1.0)))
}

/// Resolves once every child has exited.
async fn all_exited(children: &mut [Child]) {
    for child in children.iter_mut() {
        let _ = child.wait().await;
    }
}
