//! The `relay` role: delivers outbox events to webhooks and, when configured, to NATS
//! JetStream. No public port, no migrations; any number of relays share one database.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::adapters::nats::NatsSink;
use crate::config::{Secret, WebhookArgs};
use crate::db;
use crate::domain::retry::RetrySchedule;
use crate::relay::sink::Sinks;
use crate::relay::webhook::WebhookSender;
use crate::relay::{Relay, RelaySettings};

/// Connections a relay's pool holds (routing, claims and acks), plus the LISTEN connection.
pub const RELAY_POOL_SIZE: u32 = 4;

/// How a relay claims, sends and retries.
#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    /// Name written to each claim and logged try. Default: host name and process id.
    #[arg(long = "relay-id", env = "VIDQ_RELAY_ID", value_name = "NAME")]
    pub relay_id: Option<String>,
    /// Safety-net poll interval in milliseconds (NOTIFY wakes the relay sooner).
    #[arg(long = "relay-poll-ms", env = "VIDQ_RELAY_POLL_MS", value_name = "MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub relay_poll_ms: u64,
    /// Lease of a claimed delivery in seconds: if this relay dies mid-send, another sends
    /// the delivery again (same event id) after this long. At least twice the webhook timeout.
    #[arg(long = "relay-lease-secs", env = "VIDQ_RELAY_LEASE_SECS", value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub relay_lease_secs: u64,
    /// Most deliveries sent at once.
    #[arg(long = "relay-concurrency", env = "VIDQ_RELAY_CONCURRENCY", value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Most outbox rows routed, and deliveries claimed, per statement.
    #[arg(long = "relay-batch", env = "VIDQ_RELAY_BATCH", value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
    /// How long one webhook try may take, in milliseconds (connect, send, answer).
    #[arg(long = "webhook-timeout-ms", env = "VIDQ_WEBHOOK_TIMEOUT_MS", value_name = "MS", default_value_t = 15_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub webhook_timeout_ms: u64,
    /// Delay before each try, comma-separated (ms, s, m, h); a delivery is exhausted when
    /// all are used. Each delay gets ±20% jitter; a longer Retry-After is honoured.
    #[arg(long = "retry-schedule", env = "VIDQ_WEBHOOK_RETRY_SCHEDULE", value_name = "DELAYS",
          default_value = crate::domain::retry::DEFAULT_SCHEDULE)]
    pub schedule: RetrySchedule,
    /// Hours delivered events are kept (the pull feed and resends reach back this far).
    #[arg(long = "retention-hours", env = "VIDQ_EVENT_RETENTION_HOURS", value_name = "HOURS", default_value_t = 168,
          value_parser = clap::value_parser!(u64).range(1..=87_600))]
    pub retention_hours: u64,
    /// NATS server URL; when set, every event is also published to JetStream.
    #[arg(long = "nats-url", env = "VIDQ_NATS_URL", value_name = "URL")]
    pub nats_url: Option<String>,
    /// Subject prefix: events go to `<prefix>.video.ready` and so on.
    #[arg(
        long = "nats-subject-prefix",
        env = "VIDQ_NATS_SUBJECT_PREFIX",
        value_name = "PREFIX",
        default_value = "vidq"
    )]
    pub nats_subject_prefix: String,
    /// JetStream stream that captures `<prefix>.>` (created, with a 2-minute duplicate
    /// window, if missing).
    #[arg(
        long = "nats-stream",
        env = "VIDQ_NATS_STREAM",
        value_name = "NAME",
        default_value = "VIDQ"
    )]
    pub nats_stream: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub webhooks: WebhookArgs,
}

impl RelayArgs {
    /// Checks the combination and builds the settings.
    pub fn settings(&self) -> anyhow::Result<RelaySettings> {
        if self.relay_lease_secs * 1000 < self.webhook_timeout_ms * 2 {
            bail!(
                "VIDQ_RELAY_LEASE_SECS ({} s) must be at least twice VIDQ_WEBHOOK_TIMEOUT_MS ({} ms), so a slow try never outlives its claim",
                self.relay_lease_secs,
                self.webhook_timeout_ms
            );
        }
        Ok(RelaySettings {
            relay_id: self.relay_id.clone().unwrap_or_else(|| {
                format!(
                    "{}-{}",
                    super::host_name().unwrap_or_else(|| "relay".into()),
                    std::process::id()
                )
            }),
            poll: Duration::from_millis(self.relay_poll_ms),
            lease: Duration::from_secs(self.relay_lease_secs),
            batch: self.batch,
            concurrency: self.concurrency,
            schedule: self.schedule.clone(),
            retention: Duration::from_secs(self.retention_hours * 3600),
        })
    }
}

/// Settings of the `relay` role.
#[derive(Debug, Clone, Args)]
pub struct RelayConfig {
    /// PostgreSQL URL.
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Secret,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub relay: RelayArgs,
}

/// Runs a relay until `shutdown`.
pub async fn run(config: RelayConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    run_with(config.database_url.expose(), &config.relay, shutdown).await
}

/// Builds and runs a relay against `database_url` (`vidq dev` and the benchmarks call this).
pub async fn run_with(
    database_url: &str,
    args: &RelayArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let relay = build(database_url, args).await?;
    Arc::new(relay).run(shutdown).await;
    Ok(())
}

/// Connects everything a relay needs.
pub async fn build(database_url: &str, args: &RelayArgs) -> anyhow::Result<Relay> {
    let settings = args.settings()?;
    let pool = db::connect(database_url, RELAY_POOL_SIZE)
        .await
        .context("connecting to the database (DATABASE_URL)")?;
    let mut sinks = Sinks::new(WebhookSender::new(
        Duration::from_millis(args.webhook_timeout_ms),
        args.webhooks.allow_private,
    )?);
    if let Some(url) = &args.nats_url {
        sinks = sinks
            .with_nats(NatsSink::connect(url, &args.nats_stream, &args.nats_subject_prefix).await?);
    }
    Ok(Relay {
        pool,
        listen_url: Some(database_url.to_owned()),
        settings,
        sinks,
    })
}
