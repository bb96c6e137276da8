//! `vidq bench ...`: benchmarks users run on their own machines and databases. Each creates
//! a scratch database on the server it is pointed at and drops it afterwards, and reports
//! medians and percentiles measured side by side in one run.

pub mod e2e;
pub mod queue;
pub mod relay;
pub mod stats;
pub mod sweeper;
pub mod tus;

use clap::Subcommand;

/// `vidq bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Queue throughput and pickup latency with a no-op job body, through the real claim and
    /// the real fenced finalize (outbox included).
    Queue(queue::QueueBenchArgs),
    /// The seed's end-to-end protocol: three 720p clips confirmed in parallel, polled until
    /// READY, with 1 and 2 worker processes.
    E2e(e2e::E2eBenchArgs),
    /// Commit-to-delivery latency to a local webhook receiver, and sustained deliveries per
    /// relay process to webhooks and to NATS JetStream.
    Relay(relay::RelayBenchArgs),
    /// The seed's sweeper acceptance table (rounds until all pending uploads are queued,
    /// queue saturation), with and without failing rows ahead, and the time until all are
    /// confirmed in the in-process S3; real sweeper code, real PostgreSQL.
    Sweeper(sweeper::SweeperBenchArgs),
    /// Bytes per second through tus into the spool (one client, then many at once) next to
    /// `dd ... conv=fsync` on the same disk, and the API's peak memory during a large upload.
    Tus(tus::TusBenchArgs),
}

/// Runs a benchmark.
pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Queue(args) => queue::run(args).await,
        BenchCommand::E2e(args) => e2e::run(args).await,
        BenchCommand::Relay(args) => relay::run(args).await,
        BenchCommand::Sweeper(args) => sweeper::run(args).await,
        BenchCommand::Tus(args) => tus::run(args).await,
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
        let name = format!("vidq_bench_{}_{tag}", std::process::id());
        let url = crate::db::pool::with_database(url, &name)?;
        crate::db::provision::drop_database(&url).await?;
        crate::db::provision::create_database_if_missing(&url).await?;
        crate::db::migrations::run_pending(&url).await?;
        Ok(Self { url })
    }

    /// Drops it.
    pub async fn drop_now(self) {
        if let Err(error) = crate::db::provision::drop_database(&self.url).await {
            tracing::warn!(%error, "could not drop the scratch database");
        }
    }
}
