//! `vidq bench queue`: how fast the queue moves jobs with no encoding in the way.
//!
//! Throughput: W in-process workers (each group of S of them a worker process of its own, with
//! its own pool of 2 connections and S slots) drain N jobs through the real claim statement and the real fenced
//! READY finalize (video update, outbox row, attempt ledger), while a backlog of B jobs stays
//! queued behind them. Pickup: W idle workers (in the same layouts), one enqueue every 50 ms
//! through the confirm's own transaction, timed from the enqueue's commit to the claim. The
//! SQL-only ceiling (pgbench running the same statements) is measured in the same run when its
//! script is found.
//! So is a peer queue, graphile-worker, draining the same number of jobs with the same worker
//! count and backlog when Node.js and its package are installed: once with no-op jobs, and
//! once with jobs that write what vidq's finalize writes (the video READY and its event).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Scratch;
use super::stats::{median, ms, percentile};
use crate::db;
use crate::domain::ids::{UploadId, UserId, VideoId};
use crate::domain::media::MediaError;
use crate::pipeline::{AttemptOutput, AttemptPlan};
use crate::queue::JobBody;
use crate::queue::line::Listeners;
use crate::queue::runner::{ClaimObserver, Runner, WorkerSettings};

/// `vidq bench queue`.
#[derive(Debug, Args)]
pub struct QueueBenchArgs {
    /// Jobs each throughput measurement drains.
    #[arg(long, default_value_t = 20_000)]
    pub jobs: i64,
    /// Worker counts to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2,8")]
    pub workers: Vec<u32>,
    /// Slots per worker process (comma-separated; each is measured at every worker count,
    /// capped at it, for throughput and for pickup). 1 runs each worker as a process of its
    /// own; 8 runs 8 workers as one process with 8 slots, as graphile-worker's runner with
    /// concurrency 8 does. The finalizes of one process's slots commit together when they
    /// meet.
    #[arg(long, value_delimiter = ',', default_value = "1,8",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub slots: Vec<u32>,
    /// Jobs left queued behind the drained ones (comma-separated; each is measured).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub backlog: Vec<i64>,
    /// Rounds per worker count: each round measures the ceiling and then every backlog, so
    /// each ratio compares runs made minutes apart; the table shows medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Pickup samples per worker count, layout and listening mode (one enqueue every 50 ms);
    /// 0 skips the pickup test.
    #[arg(long, default_value_t = 200)]
    pub pickups: usize,
    /// The pgbench ceiling script to compare with (`run.sh` of the physical-limit bench);
    /// measured with INDEX=claimable and the heavy finalize at the same concurrency.
    #[arg(long, default_value = "../shared/bench/physical-limit/run.sh")]
    pub ceiling: PathBuf,
    /// The peer queue's drain script (graphile-worker, run with `node`; its package is
    /// installed by `npm ci --prefix scripts/peers/graphile-worker`), drained in each round
    /// right after vidq with the same jobs, workers and backlog.
    #[arg(long, default_value = "scripts/peers/graphile-worker/drain.mjs")]
    pub peer: PathBuf,
    /// Skip the peer queue.
    #[arg(long)]
    pub no_peer: bool,
    /// Users the jobs' videos are dealt to in turn. 1 is one busy tenant: every finalize
    /// then takes a key-share lock on the same user row while the others hold theirs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub owners: u32,
    /// Instead of the comparisons: drain this many jobs (a million, say) through a private
    /// PostgreSQL server with its default settings while a backlog stays queued, with the
    /// tables' own autovacuum settings and then without, and report jobs/s and the jobs
    /// table's dead rows every 100,000 jobs (at the first `--workers` and `--slots`).
    #[arg(long, value_name = "JOBS")]
    pub sustained: Option<i64>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// A job body that succeeds at once and counts READY commits.
pub(super) struct Noop {
    pub(super) ready: AtomicUsize,
    pub(super) target: usize,
    pub(super) reached: Notify,
}

impl JobBody for Noop {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<AttemptOutput, MediaError>> {
        Box::pin(async move { Ok(AttemptOutput::placeholder(plan)) })
    }

    fn after_ready(&self, _: VideoId, _: i32, _: i32) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.ready.fetch_add(1, Ordering::SeqCst) + 1 == self.target {
                self.reached.notify_one();
            }
        })
    }
}

fn settings(n: u32, slots: u32, listeners: Listeners) -> WorkerSettings {
    WorkerSettings {
        node_id: format!("bench-{n}"),
        slots,
        poll: Duration::from_secs(1),
        lease: Duration::from_secs(60),
        heartbeat: None,
        deadline: Duration::from_secs(60),
        retry_delay: Duration::from_secs(5),
        listeners,
        tool_failures: 0,
        tool_recheck: Duration::from_secs(60),
    }
}

/// The slots per process measured at `workers` workers: `slots` capped at `workers`, each
/// once, in the order given.
fn layouts(slots: &[u32], workers: u32) -> Vec<u32> {
    let mut layouts: Vec<u32> = Vec::new();
    for slots in slots.iter().map(|&s| s.clamp(1, workers.max(1))) {
        if !layouts.contains(&slots) {
            layouts.push(slots);
        }
    }
    layouts
}

/// `workers` slots as processes of `slots`: `8x1` is eight processes of one slot.
fn layout_name(workers: u32, slots: u32) -> String {
    format!("{}x{slots}", workers.div_ceil(slots))
}

/// Starts `workers` slots in all, as processes of `slots` slots each (the last one may have
/// fewer).
pub(super) async fn start_workers(
    url: &str,
    workers: u32,
    slots: u32,
    body: Arc<Noop>,
    listeners: Listeners,
    on_claim: Option<ClaimObserver>,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut handles = Vec::new();
    let slots = slots.clamp(1, workers.max(1));
    for n in 0..workers.div_ceil(slots) {
        let runner = Arc::new(Runner {
            pool: db::connect(url, crate::roles::worker::WORKER_POOL_SIZE).await?,
            database_url: url.to_owned(),
            body: body.clone(),
            settings: settings(n, slots.min(workers - n * slots), listeners),
            on_claim: on_claim.clone(),
            health: Default::default(),
        });
        handles.push(tokio::spawn(runner.run(stop.clone())));
    }
    Ok(handles)
}

/// One throughput run.
struct Drained {
    /// Jobs per second.
    rate: f64,
    /// READY finalizes per finalize transaction (1 when none met another).
    per_commit: f64,
}

/// Drains `jobs` with `workers` slots (processes of `slots` each) while `backlog` more stay
/// queued.
async fn throughput(
    server: &str,
    jobs: i64,
    workers: u32,
    slots: u32,
    backlog: i64,
    owners: u32,
) -> anyhow::Result<Drained> {
    let scratch = Scratch::create(server, "queue").await?;
    let pool = db::connect(&scratch.url, 1).await?;
    {
        let owners = bench_users(&pool, owners).await?;
        let mut conn = pool.get().await?;
        db::synthetic::backlog_of_owners(&mut conn, &owners, jobs + backlog).await?;
        db::bench::checkpoint(&mut conn).await?;
    }
    let body = Arc::new(Noop {
        ready: AtomicUsize::new(0),
        target: usize::try_from(jobs)?,
        reached: Notify::new(),
    });
    let stop = CancellationToken::new();
    let batches = &crate::metrics::FINALIZE_BATCH_SIZE;
    let (batches_before, batched_before) = (batches.get_sample_count(), batches.get_sample_sum());
    let started = Instant::now();
    let handles = start_workers(
        &scratch.url,
        workers,
        slots,
        body.clone(),
        Listeners::HeadOfLine,
        None,
        &stop,
    )
    .await?;
    body.reached.notified().await;
    let elapsed = started.elapsed();
    stop.cancel();
    for handle in handles {
        let _ = handle.await;
    }
    let ready = body.ready.load(Ordering::SeqCst) as f64;
    let batched = batches.get_sample_sum() - batched_before;
    let transactions = (batches.get_sample_count() - batches_before) as f64 + (ready - batched);
    drop(pool);
    scratch.drop_now().await;
    Ok(Drained {
        rate: jobs as f64 / elapsed.as_secs_f64(),
        per_commit: ready / transactions.max(1.0),
    })
}

/// Creates `n` users for a run's videos.
async fn bench_users(pool: &db::DbPool, n: u32) -> anyhow::Result<Vec<uuid::Uuid>> {
    let mut users = Vec::new();
    for i in 1..=n {
        let (user, _) = crate::app::users::create_user(pool, &format!("bench-{i}")).await?;
        users.push(user.0);
    }
    Ok(users)
}

/// One line of the throughput table: every round's measurements at one worker count,
/// backlog and number of slots per process.
#[derive(Default)]
struct Row {
    /// vidq's jobs/s.
    rates: Vec<f64>,
    /// vidq's jobs/s over the ceiling of the same round.
    to_ceiling: Vec<f64>,
    /// READY finalizes per finalize transaction.
    per_commit: Vec<f64>,
    /// vidq's jobs/s over the peer's of the same round, one list per [`PeerTask`].
    to_peer: [Vec<f64>; 2],
}

/// One peer task's runs at one worker count and backlog (shared by the rows of every
/// number of slots).
#[derive(Default)]
struct PeerRuns {
    /// Its jobs/s.
    rates: Vec<f64>,
    /// Why it was not measured.
    why_not: Option<String>,
}

/// What the peer's task does (`drain.mjs`'s last argument).
#[derive(Clone, Copy)]
enum PeerTask {
    /// Nothing, in an empty database: the queue alone.
    Noop,
    /// vidq's READY writes (the video's row and its event in vidq's schema), committed on their
    /// own before the peer completes the job.
    Ready,
}

impl PeerTask {
    const ALL: [PeerTask; 2] = [PeerTask::Noop, PeerTask::Ready];

    fn arg(self) -> &'static str {
        match self {
            PeerTask::Noop => "noop",
            PeerTask::Ready => "ready",
        }
    }
}

/// What the pickup test saw.
struct Pickups {
    /// Commit of each enqueue to its claim.
    latencies: Vec<Duration>,
    /// Claim statements run per job (the ones that found nothing included).
    claims_per_job: f64,
    /// Jobs claimed before the enqueuer saw its COMMIT answered (counted as 0 ms): the NOTIFY
    /// goes out at the commit, and on two busy cores a listening worker can claim before the
    /// enqueuer's thread runs again.
    early: usize,
}

/// Commit-to-claim latency with idle workers, one enqueue every 50 ms.
async fn pickups(
    server: &str,
    workers: u32,
    slots: u32,
    listeners: Listeners,
    samples: usize,
) -> anyhow::Result<Pickups> {
    let scratch = Scratch::create(server, "pickup").await?;
    let pool = db::connect(&scratch.url, 1).await?;
    let (owner, _) = crate::app::users::create_user(&pool, "bench").await?;
    let claimed: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let claims = Arc::new(AtomicUsize::new(0));
    let observer: ClaimObserver = {
        let (claimed, claims) = (claimed.clone(), claims.clone());
        Arc::new(move |job| {
            claims.fetch_add(1, Ordering::Relaxed);
            if let Some(job) = job {
                claimed
                    .lock()
                    .expect("not poisoned")
                    .insert(job, Instant::now());
            }
        })
    };
    let body = Arc::new(Noop {
        ready: AtomicUsize::new(0),
        target: usize::MAX,
        reached: Notify::new(),
    });
    let stop = CancellationToken::new();
    let handles = start_workers(
        &scratch.url,
        workers,
        slots,
        body,
        listeners,
        Some(observer),
        &stop,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await; // all idle, one of them listening
    let claims_before = claims.load(Ordering::Relaxed);
    let committed = enqueue_apart(scratch.url.clone(), owner, samples).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let claims = claims.load(Ordering::Relaxed) - claims_before;
    stop.cancel();
    for handle in handles {
        let _ = handle.await;
    }
    let claimed = claimed.lock().expect("not poisoned").clone();
    let latencies = committed
        .iter()
        .filter_map(|(job, at)| claimed.get(job).map(|c| c.saturating_duration_since(*at)))
        .collect::<Vec<_>>();
    let early = committed
        .iter()
        .filter(|(job, at)| claimed.get(job).is_some_and(|c| c < *at))
        .count();
    anyhow::ensure!(
        latencies.len() == samples,
        "only {} of {samples} jobs were claimed",
        latencies.len()
    );
    drop(pool);
    scratch.drop_now().await;
    Ok(Pickups {
        latencies,
        claims_per_job: claims as f64 / samples as f64,
        early,
    })
}

/// Enqueues `samples` jobs 50 ms apart; returns when each one's COMMIT was answered. The
/// enqueuer runs on a thread and runtime of its own: on the workers' runtime its task would
/// wait behind the ones the NOTIFY just woke, and read its COMMIT's answer late.
async fn enqueue_apart(
    url: String,
    owner: UserId,
    samples: usize,
) -> anyhow::Result<HashMap<i64, Instant>> {
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let pool = db::connect(&url, 1).await?;
            let mut conn = pool.get().await?;
            let mut committed = HashMap::new();
            for _ in 0..samples {
                let job = enqueue(&mut conn, owner).await?;
                committed.insert(job, Instant::now());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            anyhow::Ok(committed)
        })
    })
    .await?
}

/// A confirm without the S3 HEAD: a contract, then the application's own confirm
/// transaction ([`crate::app::uploads::accept`]). Returns the job's id.
async fn enqueue(conn: &mut diesel_async::AsyncPgConnection, owner: UserId) -> anyhow::Result<i64> {
    let upload = UploadId::new();
    let key = crate::domain::keys::original(upload);
    db::uploads::insert(
        conn,
        &db::uploads::NewUploadRow {
            id: upload.0,
            owner_id: owner.0,
            object_key: &key,
            filename: "bench.mp4",
            content_type: "video/mp4",
            declared_size: 1,
            expires_at: chrono::Utc::now(),
            checksum: None,
            tus_metadata: None,
        },
    )
    .await?;
    let accepted = crate::app::uploads::accept(conn, owner, upload, &key)
        .await?
        .context("the fresh contract was not confirmable")?;
    Ok(accepted.job_id)
}

/// jobs/s of the pgbench ceiling at `clients`, or why it could not be measured.
async fn ceiling(
    server: &str,
    script: &std::path::Path,
    jobs: i64,
    clients: u32,
) -> Result<f64, String> {
    if !script.exists() {
        return Err(format!("{} not found", script.display()));
    }
    let jobs = jobs - jobs % i64::from(clients);
    let database = format!("vidq_bench_{}_ceiling", std::process::id());
    // The script speaks libpq: point it at the same server as the rest of the benchmark.
    let url = url::Url::parse(&db::pool::with_default_user(server).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(script)
        .arg(jobs.to_string())
        .arg(clients.to_string())
        .arg("heavy")
        .env("INDEX", "claimable")
        .env("BENCH_DB", &database)
        .env("PGHOST", url.host_str().unwrap_or("127.0.0.1"))
        .env("PGPORT", url.port().unwrap_or(5432).to_string())
        .env("PGUSER", url.username());
    if let Some(password) = url.password() {
        command.env("PGPASSWORD", password);
    }
    let out = command.output().await.map_err(|e| e.to_string());
    // The script leaves its database behind; this benchmark cleans up after itself.
    if let Ok(scratch) = db::pool::with_database(server, &database) {
        let _ = db::provision::drop_database(&scratch).await;
    }
    jobs_per_s(&out?)
}

/// jobs/s of the peer queue draining `jobs` with `workers` while `backlog` more wait, or why
/// it could not be measured. It gets a scratch database of its own: empty for
/// [`PeerTask::Noop`], migrated and holding one queued video per job (the same synthetic
/// backlog as vidq's run) for [`PeerTask::Ready`].
async fn peer(
    server: &str,
    script: &std::path::Path,
    task: PeerTask,
    jobs: i64,
    workers: u32,
    backlog: i64,
    owners: u32,
) -> Result<f64, String> {
    let package = script.parent().unwrap_or(std::path::Path::new("."));
    if !script.exists() {
        return Err(format!("{} not found", script.display()));
    }
    if !package.join("node_modules").exists() {
        return Err(format!(
            "not installed: npm ci --prefix {}",
            package.display()
        ));
    }
    let scratch = match task {
        PeerTask::Noop => Scratch::empty(server, "peer").await,
        PeerTask::Ready => Scratch::create(server, "peer").await,
    }
    .map_err(|e| e.to_string())?;
    let out = async {
        let pool = match task {
            PeerTask::Noop => None,
            PeerTask::Ready => {
                let pool = db::connect(&scratch.url, 1).await?;
                let owners = bench_users(&pool, owners).await?;
                db::synthetic::backlog_of_owners(&mut *pool.get().await?, &owners, jobs + backlog)
                    .await?;
                Some(pool)
            }
        };
        let out = tokio::process::Command::new("node")
            .arg(script)
            .arg(&scratch.url)
            .arg(jobs.to_string())
            .arg(workers.to_string())
            .arg(backlog.to_string())
            .arg(task.arg())
            .output()
            .await
            .context("node")?;
        if let (Some(pool), true) = (&pool, out.status.success()) {
            // A run that did not write the rows measured something else. (A run that failed
            // says why on its stderr, which `jobs_per_s` passes on.)
            let mut conn = pool.get().await?;
            let (videos, events) = db::bench::ready_videos_and_events(&mut conn).await?;
            anyhow::ensure!(
                videos >= jobs && events >= jobs,
                "the peer's run left {videos} READY videos and {events} events, not {jobs}"
            );
        }
        anyhow::Ok(out)
    }
    .await
    .map_err(|e| format!("{e:#}"));
    scratch.drop_now().await;
    jobs_per_s(&out?)
}

/// The `jobs_per_s=` a ceiling or peer script printed, or what it said on stderr instead.
fn jobs_per_s(out: &std::process::Output) -> Result<f64, String> {
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("jobs_per_s=").and_then(|v| v.parse().ok()))
        .ok_or_else(|| format!("no result: {}", String::from_utf8_lossy(&out.stderr).trim()))
}

/// One line of the pickup table: medians over `runs`, then each run's p99.
fn print_pickups(workers: u32, layout: &str, listening: &str, runs: &[Pickups]) {
    let at = |p: f64| {
        let each: Vec<f64> = runs
            .iter()
            .map(|r| percentile(&r.latencies, p).as_secs_f64())
            .collect();
        ms(Duration::from_secs_f64(median(&each)))
    };
    let claims: Vec<f64> = runs.iter().map(|r| r.claims_per_job).collect();
    let each_p99: Vec<String> = runs
        .iter()
        .map(|r| ms(percentile(&r.latencies, 99.0)))
        .collect();
    let early: Vec<f64> = runs.iter().map(|r| r.early as f64).collect();
    println!(
        "{workers:>7} | {layout:>9} | {listening:<12} | {:>6} | {:>6} | {:>6} | {:>6} | {:>10.1} | {:>5.0} | {}",
        at(50.0),
        at(95.0),
        at(99.0),
        at(100.0),
        median(&claims),
        median(&early),
        each_p99.join(" ")
    );
}

/// Prints one line of the throughput table.
fn print_row(
    workers: u32,
    slots: u32,
    backlog: i64,
    row: &Row,
    peers: &[PeerRuns; 2],
    ceilings: &[f64],
    why_no_ceiling: &Option<String>,
) {
    let ratio = |r: &[f64]| match r {
        [] => "-".to_owned(),
        r => format!("{:.0}%", 100.0 * median(r)),
    };
    let rate = |r: &[f64]| match r {
        [] => "-".to_owned(),
        r => format!("{:.0}", median(r)),
    };
    let each = |r: &[f64]| -> String {
        r.iter()
            .map(|x| format!("{:.0}%", 100.0 * x))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let [noop, ready] = peers;
    let mut notes = format!(
        "finalizes/commit {:.1}; ceiling {}; no-op {}; + writes {}",
        median(&row.per_commit),
        each(&row.to_ceiling),
        each(&row.to_peer[0]),
        each(&row.to_peer[1])
    );
    for why in [why_no_ceiling, &noop.why_not, &ready.why_not]
        .into_iter()
        .flatten()
    {
        notes.push_str(&format!(" ({why})"));
    }
    let layout = layout_name(workers, slots);
    println!(
        "{workers:>7} | {layout:>9} | {backlog:>8} | {:>10} | {:>16} | {:>8} | {:>14} | {:>9} | {:>14} | {:>9} | {notes}",
        rate(&row.rates),
        rate(ceilings),
        ratio(&row.to_ceiling),
        rate(&noop.rates),
        ratio(&row.to_peer[0]),
        rate(&ready.rates),
        ratio(&row.to_peer[1]),
    );
}

/// Runs the benchmark and prints its table.
pub async fn run(args: QueueBenchArgs) -> anyhow::Result<()> {
    if let Some(total) = args.sustained {
        let workers = args.workers.first().copied().unwrap_or(2);
        let slots = args.slots.first().copied().unwrap_or(1);
        return super::sustained::run(total, workers, slots).await;
    }
    println!(
        "vidq bench queue: {} jobs per measurement, no-op job body, real claim + fenced finalize, \
         videos of {} user(s), medians of {} rounds; processes: worker processes x slots each",
        args.jobs, args.owners, args.rounds
    );
    println!();
    println!(
        "{:>7} | {:>9} | {:>8} | {:>10} | {:>16} | {:>8} | {:>14} | {:>9} | {:>14} | {:>9} | per-round ratios",
        "workers",
        "processes",
        "backlog",
        "jobs/s",
        "pgbench ceiling",
        "ratio",
        "peer no-op",
        "vidq/peer",
        "peer + writes",
        "vidq/peer"
    );
    for &workers in &args.workers {
        let mut ceilings = Vec::new();
        let mut why_no_ceiling = None;
        let layouts = layouts(&args.slots, workers);
        let mut rows: Vec<Vec<Row>> = args
            .backlog
            .iter()
            .map(|_| layouts.iter().map(|_| Row::default()).collect())
            .collect();
        let mut peers: Vec<[PeerRuns; 2]> =
            args.backlog.iter().map(|_| Default::default()).collect();
        for _ in 0..args.rounds.max(1) {
            let ceiling =
                ceiling(&args.server.database_url, &args.ceiling, args.jobs, workers).await;
            for ((rows, peers), &backlog) in rows.iter_mut().zip(&mut peers).zip(&args.backlog) {
                let server = &args.server.database_url;
                let mut rates = Vec::new();
                for (row, &slots) in rows.iter_mut().zip(&layouts) {
                    let run = throughput(server, args.jobs, workers, slots, backlog, args.owners)
                        .await
                        .context("throughput run")?;
                    let rate = run.rate;
                    row.rates.push(rate);
                    row.per_commit.push(run.per_commit);
                    if let Ok(c) = &ceiling {
                        row.to_ceiling.push(rate / c);
                    }
                    rates.push(rate);
                }
                if args.no_peer {
                    continue;
                }
                // Right after vidq's runs, so that they meet the same minutes of the machine.
                for (i, task) in PeerTask::ALL.into_iter().enumerate() {
                    let (jobs, owners) = (args.jobs, args.owners);
                    match peer(server, &args.peer, task, jobs, workers, backlog, owners).await {
                        Ok(p) => {
                            peers[i].rates.push(p);
                            for (row, rate) in rows.iter_mut().zip(&rates) {
                                row.to_peer[i].push(rate / p);
                            }
                        }
                        Err(why) => peers[i].why_not = Some(why),
                    }
                }
            }
            match ceiling {
                Ok(c) => ceilings.push(c),
                Err(why) => why_no_ceiling = Some(why),
            }
        }
        for ((rows, peers), &backlog) in rows.iter().zip(&peers).zip(&args.backlog) {
            for (row, &slots) in rows.iter().zip(&layouts) {
                print_row(
                    workers,
                    slots,
                    backlog,
                    row,
                    peers,
                    &ceilings,
                    &why_no_ceiling,
                );
            }
        }
    }
    if args.pickups > 0 {
        println!();
        println!(
            "pickup: commit of the enqueue -> claim, idle workers, one enqueue every 50 ms, {} samples \
             a round, medians of {} rounds; early: claimed before the enqueuer saw its commit \
             answered (counted as 0 ms)",
            args.pickups, args.rounds
        );
        println!(
            "{:>7} | {:>9} | {:<12} | {:>6} | {:>6} | {:>6} | {:>6} | {:>10} | {:>5} | per-round p99",
            "workers",
            "processes",
            "listening",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "claims/job",
            "early"
        );
        for &workers in &args.workers {
            // A process of several slots has one idle line, so "every idle" is "head of
            // line" when one process holds every slot.
            let runs: Vec<(u32, Listeners, &str)> = layouts(&args.slots, workers)
                .into_iter()
                .flat_map(|slots| {
                    let every =
                        (slots < workers).then_some((slots, Listeners::EveryIdle, "every idle"));
                    std::iter::once((slots, Listeners::HeadOfLine, "head of line")).chain(every)
                })
                .collect();
            let mut rounds: Vec<Vec<Pickups>> = runs.iter().map(|_| Vec::new()).collect();
            // Alternating them in each round exposes each to the same moments of the VM.
            for _ in 0..args.rounds.max(1) {
                for (i, &(slots, mode, _)) in runs.iter().enumerate() {
                    let run = pickups(
                        &args.server.database_url,
                        workers,
                        slots,
                        mode,
                        args.pickups,
                    )
                    .await
                    .context("pickup run")?;
                    rounds[i].push(run);
                }
            }
            for (runs, &(slots, _, name)) in rounds.iter().zip(&runs) {
                print_pickups(workers, &layout_name(workers, slots), name, runs);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn output(stdout: &str, stderr: &str) -> std::process::Output {
        std::process::Output {
            status: std::process::ExitStatus::from_raw(0),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_scripts_rate_is_read_from_its_line_and_its_complaint_is_passed_on() {
        let line = "jobs=10000 concurrency=8 backlog=0 seconds=4.100 jobs_per_s=2439.0 left=0\n";
        assert_eq!(jobs_per_s(&output(line, "")), Ok(2439.0));
        let failed = jobs_per_s(&output("", "  connection refused\n"));
        assert_eq!(failed, Err("no result: connection refused".to_owned()));
    }
}
