//! Settings of the `relay` role: how events are delivered to webhooks and NATS.

use std::net::SocketAddr;

use clap::Args;

use super::api::WebhookArgs;
use super::shared::{DatabaseUrl, loopback_addr};
use crate::domain::retry::RetrySchedule;

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

/// Settings of the `relay` role.
#[derive(Debug, Clone, Args)]
pub struct RelayConfig {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub database: DatabaseUrl,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub relay: RelayArgs,
    /// Serve `GET /healthz` and `GET /metrics` (the outbox backlog, deliveries by outcome,
    /// commit-to-delivery lag) on this loopback address, e.g. `127.0.0.1:9093`.
    #[arg(long = "health-listen", env = "VIDQ_HEALTH_LISTEN", value_name = "ADDR",
          value_parser = loopback_addr)]
    pub health_listen: Option<SocketAddr>,
}
