//! `vidq bench ...`: benchmarks users run on their own machines and databases. Each creates
//! a scratch database on the server it is pointed at and drops it afterwards, and reports
//! medians and percentiles measured side by side in one run.

pub mod api;
pub mod chaos;
pub mod e2e;
pub mod encoder_clock;
pub mod live;
pub mod long;
mod pgbench;
pub mod queue;
pub mod relay;
pub mod s3_faults;
pub mod stats;
pub mod sustained;
pub mod sweeper;
pub mod tus;

use clap::Subcommand;

/// `vidq bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Queue throughput and pickup latency with a no-op job body, through the real claim and
    /// the real fenced finalize (outbox included).
    Queue(queue::QueueBenchArgs),
    /// The end-to-end protocol: three 720p clips confirmed in parallel, polled until
    /// READY, with 1 and 2 worker processes; with `--long SECONDS`, one long upload encoded
    /// whole and then split into chunks across the workers.
    E2e(e2e::E2eBenchArgs),
    /// Commit-to-delivery latency to a local webhook receiver, and sustained deliveries per
    /// relay process to webhooks and to NATS JetStream.
    Relay(relay::RelayBenchArgs),
    /// The sweeper's acceptance table (rounds until all pending uploads are queued,
    /// queue saturation), with and without failing rows ahead, and the time until all are
    /// confirmed in the in-process S3; real sweeper code, real PostgreSQL.
    Sweeper(sweeper::SweeperBenchArgs),
    /// Live ingest: the latency from a segment's arrival to its appearance in the served
    /// playlist with N concurrent FFmpeg broadcasts, and how many one API process holds
    /// with that p99 at or under 1 s.
    Live(live::LiveBenchArgs),
    /// The API's own throughput: confirms (uploads created and PUT beforehand) and status
    /// reads of a READY video, with many keep-alive clients, next to pgbench running the
    /// confirm transaction's statements.
    Api(api::ApiBenchArgs),
    /// Bytes per second through tus (one client, then many at once) into either store, next
    /// to a peer tus server (@tus/server) and to where the bytes go measured alone (fio making
    /// the spool's writes and syncs, or aws-sdk-s3's multipart upload sending parts as vidq
    /// does, to the same S3), and the API's peak memory over several large uploads at once.
    Tus(tus::TusBenchArgs),
    /// The soak to run before every release: every role as a process against PostgreSQL
    /// and an S3 behind a fault proxy, uploads from retrying clients, and for N seconds
    /// random faults (a role SIGKILLed, S3 down, S3 answers lost, a PostgreSQL restart);
    /// then checks that nothing confirmed was lost, announced twice or left half done.
    Chaos(chaos::ChaosBenchArgs),
    /// One worker process of `vidq bench queue`'s throughput run (started by it, not by hand).
    #[command(hide = true)]
    QueueWorker(queue::QueueWorkerArgs),
}

/// Runs a benchmark.
pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Queue(args) => queue::run(args).await,
        BenchCommand::E2e(args) => e2e::run(args).await,
        BenchCommand::Relay(args) => relay::run(args).await,
        BenchCommand::Sweeper(args) => sweeper::run(args).await,
        BenchCommand::Tus(args) => tus::run(args).await,
        BenchCommand::Api(args) => api::run(args).await,
        BenchCommand::Live(args) => live::run(args).await,
        BenchCommand::Chaos(args) => chaos::run(args).await,
        BenchCommand::QueueWorker(args) => queue::run_child(args).await,
    }
}

/// The PostgreSQL server a benchmark creates its scratch databases on.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// Server to create the scratch databases on (they are dropped afterwards).
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "URL",
        default_value = "postgres://localhost/postgres",
        hide_env_values = true
    )]
    pub database_url: String,
}

/// A scratch database on the server `url` points at, migrated, dropped by [`Scratch::drop_now`].
pub struct Scratch {
    /// Its URL.
    pub url: String,
}

impl Scratch {
    /// Creates and migrates `vidq_bench_<pid>_<tag>`.
    pub async fn create(url: &str, tag: &str) -> anyhow::Result<Self> {
        let scratch = Self::empty(url, tag).await?;
        crate::db::migrations::run_pending(&scratch.url).await?;
        Ok(scratch)
    }

    /// Creates `vidq_bench_<pid>_<tag>` with nothing of vidq's in it (for another program).
    pub async fn empty(url: &str, tag: &str) -> anyhow::Result<Self> {
        let name = format!("vidq_bench_{}_{tag}", std::process::id());
        let url = crate::db::pool::with_database(url, &name)?;
        crate::db::provision::drop_database(&url).await?;
        crate::db::provision::create_database_if_missing(&url).await?;
        Ok(Self { url })
    }

    /// Drops it.
    pub async fn drop_now(self) {
        if let Err(error) = crate::db::provision::drop_database(&self.url).await {
            tracing::warn!(%error, "could not drop the scratch database");
        }
    }
}

/// The in-process S3 a benchmark stores into (its files under a temporary directory), with
/// a client for it and the bucket created. Child `vidq` processes reach it through
/// [`BenchS3::env`].
pub struct BenchS3 {
    /// The server.
    pub server: crate::adapters::s3_server::EmbeddedS3,
    /// A client of it.
    pub storage: crate::adapters::storage::Storage,
    /// The certificate to trust, written out, when it speaks HTTPS.
    ca_file: Option<std::path::PathBuf>,
    _dir: tempfile::TempDir,
}

/// The bucket benchmarks use.
pub const BENCH_BUCKET: &str = "vidq-bench";

impl BenchS3 {
    /// Starts it on a free loopback port, over plain HTTP.
    pub async fn start() -> anyhow::Result<Self> {
        Self::launch(false).await
    }

    /// Starts it over HTTPS (a self-signed certificate its clients are told to trust), as S3
    /// is reached in production.
    pub async fn start_tls() -> anyhow::Result<Self> {
        Self::launch(true).await
    }

    async fn launch(tls: bool) -> anyhow::Result<Self> {
        use crate::adapters::s3_server::EmbeddedS3;
        let dir = tempfile::tempdir()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let objects = dir.path().join("objects");
        let server = if tls {
            EmbeddedS3::start_tls(&objects, listener, "bench", "bench-secret")?
        } else {
            EmbeddedS3::start(&objects, listener, "bench", "bench-secret")?
        };
        let ca_file = match server.certificate() {
            Some(certificate) => {
                let path = dir.path().join("ca.pem");
                std::fs::write(&path, &certificate.pem)?;
                Some(path)
            }
            None => None,
        };
        let storage = crate::adapters::storage::Storage::connect(
            &crate::config::StorageConfig {
                endpoint: Some(server.endpoint().parse()?),
                public_endpoint: None,
                bucket: BENCH_BUCKET.to_owned(),
                prefix: String::new(),
                region: "us-east-1".to_owned(),
                force_path_style: true,
                ca: server.certificate().cloned(),
                timeouts: Default::default(),
            },
            Some(crate::adapters::storage::StaticCredentials {
                access_key_id: "bench".to_owned(),
                secret_access_key: crate::config::Secret::new("bench-secret"),
            }),
        )
        .await;
        storage.ensure_bucket().await?;
        Ok(Self {
            server,
            storage,
            ca_file,
            _dir: dir,
        })
    }

    /// Stops the server.
    pub async fn stop(self) {
        self.server.stop().await;
    }

    /// The certificate file its clients trust, when it speaks HTTPS.
    pub fn ca_file(&self) -> Option<&std::path::Path> {
        self.ca_file.as_deref()
    }

    /// The settings a `vidq` child process needs to use it.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("VIDQ_S3_ENDPOINT", self.server.endpoint()),
            ("VIDQ_S3_BUCKET", BENCH_BUCKET.to_owned()),
            ("VIDQ_S3_FORCE_PATH_STYLE", "true".to_owned()),
            ("AWS_ACCESS_KEY_ID", "bench".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "bench-secret".to_owned()),
        ];
        if let Some(path) = &self.ca_file {
            env.push(("VIDQ_S3_CA_FILE", path.display().to_string()));
        }
        env
    }
}

/// Starts a `vidq api` child process (of `bin`, else of this binary) on a free loopback port
/// against `scratch` and `s3`, with `extra` settings, and waits until it answers; returns it
/// and its base URL.
pub async fn spawn_api(
    bin: Option<&std::path::Path>,
    scratch: &Scratch,
    s3: &BenchS3,
    spool: &std::path::Path,
    extra: &[(&str, &str)],
) -> anyhow::Result<(tokio::process::Child, String)> {
    use anyhow::Context;
    let port = free_port()?;
    let mut child = role_command(bin, "api", scratch, s3, spool)?
        .arg("--no-migrate")
        .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .envs(extra.iter().copied())
        .spawn()
        .context("starting vidq api")?;
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&base, std::time::Duration::from_secs(30), Some(&mut child))
        .await
        .context("vidq api did not start")?;
    Ok((child, base))
}

/// `vidq ROLE` (of `bin`, else of this binary) on the scratch database, the bench S3 and the
/// spool, as node `bench`, quiet but for warnings, killed when dropped.
pub fn role_command(
    bin: Option<&std::path::Path>,
    role: &str,
    scratch: &Scratch,
    s3: &BenchS3,
    spool: &std::path::Path,
) -> anyhow::Result<tokio::process::Command> {
    let bin = match bin {
        Some(bin) => bin.to_owned(),
        None => std::env::current_exe()?,
    };
    let mut command = tokio::process::Command::new(bin);
    command
        .arg(role)
        .env("DATABASE_URL", &scratch.url)
        .envs(s3.env())
        .env("VIDQ_SPOOL_DIR", spool)
        .env("VIDQ_NODE_ID", "bench")
        .env(
            "VIDQ_PLAYBACK_SECRET",
            "vidq-bench-playback-secret-0123456789abcdef",
        )
        .env("RUST_LOG", "warn")
        // Any free port (a bench that publishes over RTMP names its own).
        .env("VIDQ_RTMP_ADDR", "127.0.0.1:0")
        .kill_on_drop(true);
    Ok(command)
}

/// A loopback port free a moment ago, for a child process that needs one named.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Returns once `{base}/healthz` answers 2xx; fails after `within`, or as soon as `child`
/// (the process serving `base`, when given) has exited, with its exit status.
pub async fn wait_healthy(
    base: &str,
    within: std::time::Duration,
    mut child: Option<&mut tokio::process::Child>,
) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + within;
    loop {
        let up = http
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if up {
            return Ok(());
        }
        if let Some(child) = child.as_deref_mut()
            && let Some(status) = child.try_wait()?
        {
            anyhow::bail!("the process serving {base} exited at start ({status})");
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{base} did not answer /healthz within {} s",
            within.as_secs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `seconds` of FFmpeg's test picture at `size` (`WxH`) and `rate` and a 440 Hz tone, H.264
/// (a keyframe every `gop` frames) and AAC, moov first, written to `path`.
pub async fn test_clip(
    path: &std::path::Path,
    size: &str,
    rate: u32,
    seconds: u32,
    gop: u32,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let status = tokio::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg(format!(
            "testsrc2=size={size}:rate={rate}:duration={seconds}"
        ))
        .args(["-f", "lavfi", "-i"])
        .arg(format!("sine=frequency=440:duration={seconds}"))
        .args([
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-g",
            &gop.to_string(),
        ])
        .args(["-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest"])
        .args(["-movflags", "+faststart"])
        .arg(path)
        .status()
        .await
        .context("running ffmpeg (is it installed?)")?;
    anyhow::ensure!(status.success(), "ffmpeg could not make {}", path.display());
    Ok(())
}
