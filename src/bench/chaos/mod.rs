//! `vidq bench chaos --seconds N`: the soak to run before every release. A whole deployment
//! runs as processes (an API and its sweeper, three workers, two relays) against PostgreSQL
//! and an S3 behind a fault proxy; upload clients that retry as real ones do keep it busy;
//! and for N seconds, one fault in every `--every` seconds, chosen at random: a role
//! SIGKILLed (and started again), S3 down, S3 answers lost after storing, a PostgreSQL
//! restart. Then the faults stop, the deployment gets `--settle-secs` to finish, and the
//! checks run: every confirmed upload READY, one `video.ready` per video, every event
//! delivered to the local receiver with a valid signature, no job or ledger row left
//! behind, `vidq reconcile` finding nothing, and no 500 from the API. Any failed check makes
//! the command fail, and the working directory (every role's log) is kept.

pub mod checks;
pub mod clients;
pub mod cluster;
pub mod receiver;
mod schedule;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use self::checks::Check;
use self::clients::{Client, Tally};
use self::cluster::{Cluster, Database};
use crate::bench::s3_faults::Fault;
use crate::sync::Locked;

/// `vidq bench chaos`.
#[derive(Debug, clap::Args)]
pub struct ChaosBenchArgs {
    /// How long faults are injected, in seconds; then the deployment is healed and checked.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub seconds: u64,
    /// One fault in every window of this many seconds, at a random moment in it.
    #[arg(long, default_value_t = 4.0)]
    pub every: f64,
    /// The faults to choose from, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "kill,s3-down,s3-lose,pg-restart"
    )]
    pub faults: Vec<FaultKind>,
    /// S3 is down (every request 503) for this many seconds from before the first role
    /// starts, with the clients at work, before the faults begin (0: up from the start).
    #[arg(long = "s3-down-at-start", value_name = "SECS", default_value_t = 0)]
    pub s3_down_at_start: u64,
    /// Upload clients at once (half start with presigned uploads, half with tus).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub clients: u32,
    /// Uploads confirmed and not yet READY, at most, before the clients start another.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..))]
    pub backlog: u32,
    /// Seed of the random choices; printed, so a run can be repeated.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Seconds the healed deployment gets to finish everything before the checks fail.
    #[arg(long = "settle-secs", default_value_t = 180)]
    pub settle_secs: u64,
    /// Run against a scratch database on this server instead of a private one (the soak
    /// never restarts a shared server unless `--pg-restart-command` says how).
    #[arg(long = "database-url", value_name = "URL")]
    pub database_url: Option<String>,
    /// With `--database-url`: a shell command that restarts that server (e.g.
    /// `pg_ctlcluster 15 main restart -m fast`).
    #[arg(
        long = "pg-restart-command",
        value_name = "CMD",
        requires = "database_url"
    )]
    pub pg_restart_command: Option<String>,
    /// Keep the working directory (logs, spool, the private cluster) here. Default: a
    /// temporary directory, kept only when a check fails.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Also print the report as one JSON object on the last line.
    #[arg(long)]
    pub json: bool,
}

/// A fault the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL of a random role, started again 0.2-2 s later.
    Kill,
    /// S3 answers every request with 503 for 1-6 s.
    S3Down,
    /// The next 1-3 PUTs are stored and their answers lost (the connection dropped).
    S3Lose,
    /// `pg_ctl restart -m fast` of the PostgreSQL server.
    PgRestart,
}

/// Runs the soak and prints its report; fails when a check fails.
pub async fn run(args: ChaosBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.every > 0.0, "--every must be more than 0");
    anyhow::ensure!(!args.faults.is_empty(), "--faults names none");
    let seed = args.seed.unwrap_or_else(rand::random);
    let kept = args.dir.is_some();
    let temp = tempfile::Builder::new().prefix("vidq-chaos-").tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| temp.path().to_owned());
    std::fs::create_dir_all(&dir)?;
    let dir = std::fs::canonicalize(&dir)?;
    let database = match &args.database_url {
        Some(url) => Database::Shared {
            scratch: super::Scratch::create(url, "chaos").await?,
            restart: args.pg_restart_command.clone(),
        },
        None => {
            let server = crate::adapters::private_pg::PrivatePostgres::start(&dir.join("pg"))
                .await
                .context("starting the soak's private PostgreSQL (or pass --database-url)")?;
            crate::db::provision::create_database_if_missing(&server.url).await?;
            crate::db::migrations::run_pending(&server.url).await?;
            Database::Private(server)
        }
    };
    anyhow::ensure!(
        database.restartable() || !args.faults.contains(&FaultKind::PgRestart),
        "pg-restart needs the private server, or --pg-restart-command for a shared one"
    );
    let outcome = soak(&args, seed, &dir, &database).await;
    let passed = outcome
        .as_ref()
        .is_ok_and(|report| report.checks.iter().all(|c| c.ok));
    database.finish(&dir, passed).await;
    let report = outcome?;
    report.print(&args, seed);
    if report.checks.iter().all(|c| c.ok) {
        if !kept {
            drop(temp);
        }
        Ok(())
    } else {
        let path = temp.keep();
        let dir = if kept { dir } else { path };
        anyhow::bail!(
            "a check failed; every role's log is in {}",
            dir.join("logs").display()
        )
    }
}

/// What a run found.
#[derive(serde::Serialize)]
struct Report {
    seed: u64,
    s3_down_at_start: u64,
    seconds: u64,
    faults: Vec<(FaultKind, String)>,
    killed: Vec<(String, u32)>,
    exited_on_their_own: Vec<(String, u32)>,
    presigned: u32,
    tus: u32,
    statuses: std::collections::BTreeMap<u16, u32>,
    no_answer: u32,
    refused: Vec<String>,
    settled_secs: f64,
    error_lines: Vec<(String, usize)>,
    first_errors: Vec<String>,
    checks: Vec<Check>,
}

async fn soak(
    args: &ChaosBenchArgs,
    seed: u64,
    dir: &std::path::Path,
    database: &Database,
) -> anyhow::Result<Report> {
    let url = database.url().to_owned();
    let pool = crate::db::connect(&url, 2).await?;
    let (_, key) = crate::app::users::create_user(&pool, "chaos").await?;
    let key = key.reveal().to_owned();
    // Small, so three workers on a small machine keep up with four clients.
    let clip_path = dir.join("clip.mp4");
    super::test_clip(&clip_path, "160x120", 15, 2, 15).await?;
    let clip = std::fs::read(&clip_path)?;
    let s3 = super::BenchS3::start().await?;
    let down_at_start = args.s3_down_at_start > 0;
    let mut cluster =
        Cluster::start(std::env::current_exe()?, dir, &url, s3, down_at_start).await?;
    let receiver = receiver::Receiver::start()?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()?;
    let endpoint: serde_json::Value = http
        .post(format!("{}/v1/webhooks", cluster.api))
        .bearer_auth(&key)
        .json(&serde_json::json!({ "url": receiver.url }))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let secret = endpoint["secret"].as_str().unwrap_or_default();
    receiver.trust(crate::domain::signature::WebhookSecret::parse(secret)?);

    let tally = Arc::new(Tally::default());
    let (stop_new, give_up) = (CancellationToken::new(), CancellationToken::new());
    let mut clients = tokio::task::JoinSet::new();
    for n in 0..args.clients {
        let client = Client {
            api: cluster.api.clone(),
            key: key.clone(),
            clip: clip.clone(),
            http: http.clone(),
            ready: receiver.ready(),
            backlog: args.backlog,
        };
        let (tally, stop_new, give_up) = (tally.clone(), stop_new.clone(), give_up.clone());
        clients.spawn(async move {
            client.run(n % 2 == 1, &tally, &stop_new, &give_up).await;
        });
    }

    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    if down_at_start {
        // Every role started without S3; the clients are already at work.
        wait_until(
            Instant::now() + Duration::from_secs(args.s3_down_at_start),
            &mut cluster,
        )
        .await?;
        cluster.proxy.set_down(false);
    }
    let faults = inject(args, &mut rng, &mut cluster, database).await?;

    // Healed: every role runs, S3 answers, and no new upload starts; those under way finish.
    cluster.proxy.set_down(false);
    cluster.revive()?;
    stop_new.cancel();
    let settle = Instant::now();
    let deadline = settle + Duration::from_secs(args.settle_secs);
    let supervise = |cluster: &mut Cluster| cluster.revive().map(drop);
    while !clients.is_empty() {
        if Instant::now() > deadline {
            give_up.cancel();
        }
        supervise(&mut cluster)?;
        let _ = tokio::time::timeout(Duration::from_millis(500), clients.join_next()).await;
    }
    let confirmed = tally.confirmed.locked().clone();
    let mut checks = loop {
        let arrivals = receiver.arrivals();
        // The soak's own connections die with a restart too: a failed read is tried again.
        let checks = checks::settled(&pool, &confirmed, &arrivals.verified, arrivals.bad).await;
        match checks {
            Ok(checks) if checks.iter().all(|c| c.ok) || Instant::now() > deadline => {
                break checks;
            }
            Err(error) if Instant::now() > deadline => return Err(error),
            _ => {}
        }
        supervise(&mut cluster)?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let settled_secs = settle.elapsed().as_secs_f64();
    cluster.stop().await;
    checks.push(reconcile(&cluster, &url).await?);
    let internal = tally.count(500);
    checks.push(Check {
        name: "no 500 answer from the API",
        ok: internal == 0,
        detail: internal.to_string(),
    });
    receiver.stop().await;
    let errors = cluster.error_lines();
    checks.push(checks::no_unexpected_errors(&errors));
    let report = Report {
        seed,
        s3_down_at_start: args.s3_down_at_start,
        seconds: args.seconds,
        faults,
        killed: cluster
            .roles
            .iter()
            .map(|r| (r.name.clone(), r.killed))
            .collect(),
        exited_on_their_own: cluster
            .roles
            .iter()
            .filter(|r| r.exited > 0)
            .map(|r| (r.name.clone(), r.exited))
            .collect(),
        presigned: tally.presigned.load(std::sync::atomic::Ordering::Relaxed),
        tus: tally.tus.load(std::sync::atomic::Ordering::Relaxed),
        statuses: tally.statuses.locked().clone(),
        no_answer: tally.no_answer.load(std::sync::atomic::Ordering::Relaxed),
        refused: tally.refused.locked().clone(),
        settled_secs,
        error_lines: errors.iter().map(|(r, l)| (r.clone(), l.len())).collect(),
        first_errors: errors
            .iter()
            .flat_map(|(role, lines)| lines.iter().take(3).map(move |l| format!("{role}: {l}")))
            .collect(),
        checks,
    };
    cluster.s3.stop().await;
    Ok(report)
}

/// Injects one fault per `--every` window for `--seconds` (every kind, and a kill of every
/// role, at least once: `schedule`), restarting any role that exits on its own meanwhile;
/// returns what was done, in order.
async fn inject(
    args: &ChaosBenchArgs,
    rng: &mut rand::rngs::StdRng,
    cluster: &mut Cluster,
    database: &Database,
) -> anyhow::Result<Vec<(FaultKind, String)>> {
    let start = Instant::now();
    let end = start + Duration::from_secs(args.seconds);
    let window = Duration::from_secs_f64(args.every);
    let windows = (args.seconds as f64 / args.every).floor() as usize;
    let names: Vec<String> = cluster.roles.iter().map(|r| r.name.clone()).collect();
    let plan = schedule::plan(windows, &args.faults, &names, rng)?;
    let mut done = Vec::new();
    let mut next_window = start;
    for planned in plan {
        let at = next_window + window.mul_f64(rng.random_range(0.0..1.0));
        next_window += window;
        wait_until(at, cluster).await?;
        let kind = match planned {
            schedule::Planned::Kill(_) => FaultKind::Kill,
            schedule::Planned::Other(kind) => kind,
        };
        let what = match kind {
            FaultKind::Kill => {
                let schedule::Planned::Kill(i) = planned else {
                    unreachable!("a kill is planned with its role")
                };
                cluster.kill(i).await;
                tokio::time::sleep(Duration::from_millis(rng.random_range(200..2000))).await;
                cluster.restart(i)?;
                cluster.roles[i].name.clone()
            }
            FaultKind::S3Down => {
                let down = Duration::from_millis(rng.random_range(1000..6000));
                cluster.proxy.set_down(true);
                tokio::time::sleep(down).await;
                cluster.proxy.set_down(false);
                format!("{:.1} s", down.as_secs_f64())
            }
            FaultKind::S3Lose => {
                let n = rng.random_range(1..=3);
                cluster.proxy.plan(&vec![Fault::LoseResponse; n]);
                format!("{n} answers")
            }
            FaultKind::PgRestart => {
                let began = Instant::now();
                database.restart().await?;
                format!("down {:.1} s", began.elapsed().as_secs_f64())
            }
        };
        tracing::info!(fault = ?kind, %what, "fault injected");
        done.push((kind, what));
    }
    wait_until(end, cluster).await?;
    Ok(done)
}

/// Sleeps until `at`, starting again any role that exits on its own meanwhile.
async fn wait_until(at: Instant, cluster: &mut Cluster) -> anyhow::Result<()> {
    while Instant::now() < at {
        for name in cluster.revive()? {
            tracing::warn!(role = %name, "a role exited on its own; started again");
        }
        tokio::time::sleep((at - Instant::now()).min(Duration::from_millis(250))).await;
    }
    Ok(())
}

/// `vidq reconcile` over the whole bucket (read directly, not through the proxy) with a
/// grace of 0: the deployment has settled and stopped, so nothing is in flight, and an object
/// made during the soak that no row owns is a difference, however young.
async fn reconcile(cluster: &Cluster, url: &str) -> anyhow::Result<Check> {
    let out = tokio::process::Command::new(std::env::current_exe()?)
        .args(["reconcile", "--grace-secs", "0"])
        .env("DATABASE_URL", url)
        .envs(cluster.s3.env())
        .env("VIDQ_SPOOL_DIR", cluster.dir.join("api-1").join("spool"))
        .env("RUST_LOG", "warn")
        .output()
        .await?;
    let said = String::from_utf8_lossy(&out.stdout);
    Ok(Check {
        name: "vidq reconcile --grace-secs 0 finds no difference",
        ok: out.status.success(),
        detail: format!(
            "{} ({})",
            out.status,
            said.lines().last().unwrap_or_default().trim()
        ),
    })
}

impl Report {
    fn print(&self, args: &ChaosBenchArgs, seed: u64) {
        println!(
            "vidq bench chaos: {} s of faults, one per {} s (seed {seed}); api + sweeper + 3 workers + 2 relays; {} clients",
            self.seconds, args.every, args.clients
        );
        if self.s3_down_at_start > 0 {
            println!(
                "S3 down at start: every role started without it, clients at work, for {} s",
                self.s3_down_at_start
            );
        }
        println!("faults ({}):", self.faults.len());
        for (kind, what) in &self.faults {
            println!("  {kind:?}: {what}");
        }
        println!(
            "killed: {}",
            self.killed
                .iter()
                .map(|(r, n)| format!("{r} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !self.exited_on_their_own.is_empty() {
            println!("exited on their own: {:?}", self.exited_on_their_own);
        }
        println!(
            "uploads confirmed: {} ({} presigned, {} tus); API answers by status: {:?}; requests without an answer: {}",
            self.presigned + self.tus,
            self.presigned,
            self.tus,
            self.statuses,
            self.no_answer
        );
        for why in &self.refused {
            println!("  upload refused: {why}");
        }
        println!("settled in {:.1} s", self.settled_secs);
        println!(
            "ERROR lines: {}",
            self.error_lines
                .iter()
                .map(|(r, n)| format!("{r} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for line in &self.first_errors {
            println!("  {line}");
        }
        println!("checks:");
        for check in &self.checks {
            let mark = if check.ok { "ok  " } else { "FAIL" };
            println!("  {mark} {}: {}", check.name, check.detail);
        }
        if args.json {
            println!(
                "{}",
                serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
            );
        }
    }
}
