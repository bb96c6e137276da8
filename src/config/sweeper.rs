//! Settings of the `sweeper` role and of `vidq reconcile`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::ingest::{LiveArgs, SpoolArgs};
use super::shared::{DatabaseUrl, StorageConfig, loopback_addr};

/// How the upload sweeper pages, queues, retries and protects S3 (docs/architecture.md,
/// "Upload recovery"). The database row is the ledger; the queue is only a throttle.
#[derive(Debug, Clone, Args)]
pub struct SweeperArgs {
    /// Capacity of the in-memory queue between the ledger reader and the upload workers; a
    /// full queue leaves rows for a later round (counted as saturation).
    #[arg(long = "sweeper-queue", env = "VIDQ_SWEEPER_QUEUE", value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub queue: u32,
    /// Upload workers (concurrent PUTs).
    #[arg(long = "sweeper-workers", env = "VIDQ_SWEEPER_WORKERS", value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Pending rows read per round through the forward cursor.
    #[arg(long = "sweeper-page", env = "VIDQ_SWEEPER_PAGE", value_name = "N",
          default_value_t = crate::domain::sweep::DEFAULT_PAGE,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub page: u32,
    /// Pause between rounds, in milliseconds (a round that read a full page and queued all
    /// of it is followed at once).
    #[arg(long = "sweeper-interval-ms", env = "VIDQ_SWEEPER_INTERVAL_MS", value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub interval_ms: u64,
    /// How long a sweeper holds a row it queued (its claim); a sweeper that dies loses its
    /// rows to the others after this long. Longer than one PUT of the largest upload.
    #[arg(long = "sweeper-claim-secs", env = "VIDQ_SWEEPER_CLAIM_SECS", value_name = "SECS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub claim_secs: u64,
    /// Consecutive S3 failures that open the circuit breaker (PUTs stop).
    #[arg(long = "sweeper-breaker-failures", env = "VIDQ_SWEEPER_BREAKER_FAILURES", value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub breaker_failures: u32,
    /// How often the orphan pass runs, in seconds (0: never): objects no live row owns
    /// (non-live attempt prefixes, deleted videos, lapsed uploads) are deleted and dead
    /// attempts' pending output rows forgotten. One sweeper of the cluster runs it at a time.
    #[arg(long = "sweeper-orphan-interval-secs", env = "VIDQ_SWEEPER_ORPHAN_INTERVAL_SECS", value_name = "SECS",
          default_value_t = 900, value_parser = clap::value_parser!(u64).range(0..=604_800))]
    pub orphan_interval_secs: u64,
    /// The orphan pass leaves objects and rows younger than this alone, in seconds: they may
    /// be uploads or encodes in flight.
    #[arg(long = "sweeper-orphan-grace-secs", env = "VIDQ_SWEEPER_ORPHAN_GRACE_SECS", value_name = "SECS",
          default_value_t = 3600, value_parser = clap::value_parser!(u64).range(60..=31_536_000))]
    pub orphan_grace_secs: u64,
    /// How long the breaker stays open before one probe PUT, in milliseconds.
    #[arg(long = "sweeper-breaker-cooldown-ms", env = "VIDQ_SWEEPER_BREAKER_COOLDOWN_MS", value_name = "MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub breaker_cooldown_ms: u64,
}

/// Settings of the `sweeper` role.
#[derive(Debug, Clone, Args)]
#[allow(missing_docs)] // flattened groups are documented on their own types
pub struct SweeperConfig {
    #[command(flatten)]
    pub database: DatabaseUrl,
    /// This node's name: the sweeper re-drives only rows whose spool is on this node.
    /// Default: the host name.
    #[arg(long = "node-id", env = "VIDQ_NODE_ID", value_name = "NAME")]
    pub node_id: Option<String>,
    #[command(flatten)]
    pub spool: SpoolArgs,
    #[command(flatten)]
    pub sweeper: SweeperArgs,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub storage: StorageConfig,
    /// Serve `/healthz` and `/metrics` (counters, queue, circuit breaker state) on this
    /// loopback address (e.g. 127.0.0.1:9092). Off by default; only loopback addresses are
    /// accepted.
    #[arg(long = "health-listen", env = "VIDQ_HEALTH_LISTEN", value_name = "ADDR",
          value_parser = loopback_addr)]
    pub health_listen: Option<SocketAddr>,
}

/// Settings of `vidq reconcile`.
#[derive(Debug, Clone, Args)]
#[allow(missing_docs)] // flattened groups are documented on their own types
pub struct ReconcileConfig {
    #[command(flatten)]
    pub database: DatabaseUrl,
    #[command(flatten)]
    pub storage: StorageConfig,
    /// Objects no row owns are called orphans only once they are this old (seconds, by
    /// their last-modified time): younger ones may be uploads or encodes in flight.
    #[arg(long = "grace-secs", env = "VIDQ_RECONCILE_GRACE_SECS", value_name = "SECS",
          default_value_t = 3600, value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    pub grace_secs: u64,
    /// Where this node's spool files are (`--fix` re-drives uploads through vidq whose
    /// spool file is still there). Default: `./spool`.
    #[arg(long = "spool-dir", env = "VIDQ_SPOOL_DIR", value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    /// Delete the orphans and re-drive the rows that can be re-driven.
    #[arg(long)]
    pub fix: bool,
    /// Print the report as one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}
