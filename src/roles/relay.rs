//! The `relay` role: delivers outbox events to webhooks and, when configured, to NATS
//! JetStream. No public port, no migrations; any number of relays share one database.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio_util::sync::CancellationToken;

use crate::adapters::nats::NatsSink;
pub use crate::config::{RelayArgs, RelayConfig};
use crate::db;
use crate::relay::health::RelayHealth;
use crate::relay::sink::Sinks;
use crate::relay::webhook::WebhookSender;
use crate::relay::{Relay, RelaySettings};

/// Connections a relay's pool holds (routing, claims and acks), plus the LISTEN connection.
pub const RELAY_POOL_SIZE: u32 = 4;

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

/// Runs a relay until `shutdown`.
pub async fn run(config: RelayConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let relay = Arc::new(build(config.database.url.expose(), &config.relay).await?);
    if let Some(addr) = config.health_listen {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} (VIDQ_HEALTH_LISTEN)"))?;
        let health = RelayHealth::default();
        health.watch(
            relay.pool.clone(),
            super::presence::REPORT_EVERY,
            shutdown.child_token(),
        );
        let server =
            crate::http::health_listener::serve(listener, Arc::new(health), shutdown.clone())?;
        tracing::info!(%addr, "health listener on /healthz and /metrics");
        tokio::spawn(server);
    }
    run_built(relay, shutdown).await;
    Ok(())
}

/// Runs a built relay, reporting it on the dashboard.
async fn run_built(relay: Arc<Relay>, shutdown: CancellationToken) {
    let concurrency = relay.settings.concurrency;
    super::presence::spawn(
        relay.pool.clone(),
        super::presence::Presence {
            role: "relay",
            node_id: relay.settings.relay_id.clone(),
            slots: concurrency,
            detail: Arc::new(move || serde_json::json!({ "concurrency": concurrency })),
        },
        shutdown.child_token(),
    );
    relay.run(shutdown).await;
}

/// Builds and runs a relay against `database_url` (`vidq dev` and the benchmarks call this).
pub async fn run_with(
    database_url: &str,
    args: &RelayArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let relay = build(database_url, args).await?;
    run_built(Arc::new(relay), shutdown).await;
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
