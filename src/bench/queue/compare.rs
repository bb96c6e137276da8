//! What vidq's rate is compared with, each run as a script of its own: the SQL-only ceiling
//! (pgbench running the same statements) and a peer queue (graphile-worker), each on a
//! scratch database it leaves behind for this module to drop.

use anyhow::Context;

use super::throughput::bench_users;
use crate::bench::Scratch;
use crate::db;

/// One peer task's runs at one worker count and backlog (shared by the rows of every
/// number of slots).
#[derive(Default)]
pub(super) struct PeerRuns {
    /// Its jobs/s.
    pub(super) rates: Vec<f64>,
    /// Why it was not measured.
    pub(super) why_not: Option<String>,
}

/// What the peer's task does (`drain.mjs`'s last argument).
#[derive(Clone, Copy)]
pub(super) enum PeerTask {
    /// Nothing, in an empty database: the queue alone.
    Noop,
    /// vidq's READY writes (the video's row and its event in vidq's schema), committed on their
    /// own before the peer completes the job.
    Ready,
}

impl PeerTask {
    pub(super) const ALL: [PeerTask; 2] = [PeerTask::Noop, PeerTask::Ready];

    fn arg(self) -> &'static str {
        match self {
            PeerTask::Noop => "noop",
            PeerTask::Ready => "ready",
        }
    }
}

/// jobs/s of the pgbench ceiling at `clients`, or why it could not be measured.
pub(super) async fn ceiling(
    server: &str,
    script: Option<&std::path::Path>,
    jobs: i64,
    clients: u32,
) -> Result<f64, String> {
    let Some(script) = script else {
        return Err("no --ceiling script given".to_owned());
    };
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
pub(super) async fn peer(
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
