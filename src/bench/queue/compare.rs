//! What vidq's rate is compared with: the SQL-only ceilings (pgbench running the queue's own
//! statements, [`crate::db::queue_ceiling`], one job and up to 8 jobs a transaction) and a
//! peer queue (graphile-worker, at its defaults and at its documented throughput settings),
//! each on a scratch database of its own.

use anyhow::Context;

use super::throughput::bench_users;
use crate::bench::Scratch;
use crate::db;

/// A ceiling's or a peer's results at one worker count and backlog, over the rounds (shared
/// by the rows of every layout).
#[derive(Default)]
pub(super) struct Measured {
    /// Its jobs/s.
    pub(super) rates: Vec<f64>,
    /// Why it was not measured.
    pub(super) why_not: Option<String>,
}

/// What the peer's task does (`drain.mjs`'s fifth argument).
#[derive(Clone, Copy)]
pub(super) enum PeerTask {
    /// Nothing, in an empty database: the queue alone.
    Noop,
    /// vidq's READY writes (the video's row and its event in vidq's schema), committed on their
    /// own before the peer completes the job.
    Ready,
}

/// How the peer is set up (`drain.mjs`'s last argument).
#[derive(Clone, Copy)]
pub(super) enum PeerSettings {
    /// As it comes: each worker fetches its own job, each completion is its own commit.
    Defaults,
    /// Its documented throughput settings: a local queue of concurrency + 1 jobs fetched
    /// together, and completions batched (delay 0).
    Batched,
}

/// One way the peer is run in each round.
#[derive(Clone, Copy)]
pub(super) struct PeerRun {
    pub(super) task: PeerTask,
    pub(super) settings: PeerSettings,
}

impl PeerRun {
    /// Every way, in the order of the table's columns.
    pub(super) const ALL: [PeerRun; 4] = [
        PeerRun::new(PeerTask::Noop, PeerSettings::Defaults),
        PeerRun::new(PeerTask::Noop, PeerSettings::Batched),
        PeerRun::new(PeerTask::Ready, PeerSettings::Defaults),
        PeerRun::new(PeerTask::Ready, PeerSettings::Batched),
    ];

    const fn new(task: PeerTask, settings: PeerSettings) -> PeerRun {
        PeerRun { task, settings }
    }

    /// The table's column heading.
    pub(super) fn heading(self) -> &'static str {
        match (self.task, self.settings) {
            (PeerTask::Noop, PeerSettings::Defaults) => "peer no-op",
            (PeerTask::Noop, PeerSettings::Batched) => "batched no-op",
            (PeerTask::Ready, PeerSettings::Defaults) => "peer + writes",
            (PeerTask::Ready, PeerSettings::Batched) => "batched + wr.",
        }
    }

    fn args(self) -> [&'static str; 2] {
        let task = match self.task {
            PeerTask::Noop => "noop",
            PeerTask::Ready => "ready",
        };
        let settings = match self.settings {
            PeerSettings::Defaults => "defaults",
            PeerSettings::Batched => "batched",
        };
        [task, settings]
    }
}

/// How the SQL-only ceiling sends its jobs ([`crate::db::queue_ceiling`]).
#[derive(Clone, Copy)]
pub(super) enum CeilingShape {
    /// One job per transaction, one client per worker.
    OneJob,
    /// Up to 8 jobs per transaction (claimed together, finalized in one commit), the workers'
    /// slots shared out among as few clients as that takes.
    Batched,
}

impl CeilingShape {
    pub(super) const ALL: [CeilingShape; 2] = [CeilingShape::OneJob, CeilingShape::Batched];

    /// Jobs per transaction and clients, at `workers`.
    fn layout(self, workers: u32) -> (u32, u32) {
        match self {
            CeilingShape::OneJob => (1, workers),
            CeilingShape::Batched => {
                let batch = workers.clamp(1, 8);
                (batch, workers.div_ceil(batch))
            }
        }
    }

    /// The table's column heading.
    pub(super) fn heading(self) -> &'static str {
        match self {
            CeilingShape::OneJob => "ceiling 1/tx",
            CeilingShape::Batched => "ceiling batch",
        }
    }
}

/// jobs/s of pgbench running the queue's SQL ([`crate::db::queue_ceiling`]) at `workers`, on a
/// scratch database holding the same synthetic backlog as vidq's run, or why it could not be
/// measured.
pub(super) async fn ceiling(
    server: &str,
    shape: CeilingShape,
    jobs: i64,
    workers: u32,
    backlog: i64,
    owners: u32,
) -> Result<f64, String> {
    let (batch, clients) = shape.layout(workers);
    let per_client = u64::try_from(jobs).unwrap_or(0) / u64::from(batch * clients);
    if per_client == 0 {
        return Err(format!(
            "--jobs {jobs} is fewer than one transaction a client"
        ));
    }
    let scratch = Scratch::create(server, "ceiling")
        .await
        .map_err(|e| format!("{e:#}"))?;
    let run = async {
        let pool = db::connect(&scratch.url, 1).await?;
        let owners = bench_users(&pool, owners).await?;
        {
            let mut conn = pool.get().await?;
            // Every client's first claim and its last (made, never finalized) come on top.
            let claimed = jobs + i64::from(2 * batch * clients);
            db::synthetic::backlog_of_owners(&mut conn, &owners, claimed + backlog).await?;
            db::bench::checkpoint(&mut conn).await?;
        }
        drop(pool);
        let script = match shape {
            CeilingShape::OneJob => db::queue_ceiling::one_job_per_transaction(),
            CeilingShape::Batched => db::queue_ceiling::batched(batch as usize),
        };
        let (name, first) = db::queue_ceiling::HOLDING;
        let holding = [(name, first.to_owned())];
        let tps = crate::bench::pgbench::tps(&scratch.url, &script, clients, per_client, &holding)
            .await?;
        // Each transaction finalized a whole batch: the claims always found one (the backlog).
        anyhow::Ok(tps * f64::from(batch))
    };
    let result = run.await;
    scratch.drop_now().await;
    result.map_err(|e| format!("{e:#}"))
}

/// jobs/s of the peer queue draining `jobs` with `workers` while `backlog` more wait, or why
/// it could not be measured. It gets a scratch database of its own: empty for
/// [`PeerTask::Noop`], migrated and holding one queued video per job (the same synthetic
/// backlog as vidq's run) for [`PeerTask::Ready`].
pub(super) async fn peer(
    server: &str,
    script: &std::path::Path,
    run: PeerRun,
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
    let task = run.task;
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
            .args(run.args())
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

/// The `jobs_per_s=` the peer's script printed, or what it said on stderr instead.
fn jobs_per_s(out: &std::process::Output) -> Result<f64, String> {
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("jobs_per_s=").and_then(|v| v.parse().ok()))
        .ok_or_else(|| format!("no result: {}", String::from_utf8_lossy(&out.stderr).trim()))
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
