//! What a relay tells its health listener (`VIDQ_HEALTH_LISTEN`): healthy while its reads of
//! the outbox work; the outbox backlog, deliveries by outcome and commit-to-delivery lag in
//! Prometheus' text format. The backlog is read every few seconds by [`RelayHealth::watch`],
//! never by a scrape.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::db::operator_view::Backlog;
use crate::db::{self, DbPool};
use crate::http::health_listener::HealthReport;
use crate::metrics::{self, Exposition};
use crate::sync::Locked;

/// The relay's last look at the outbox.
#[derive(Clone, Default)]
pub struct RelayHealth {
    last: Arc<Mutex<Option<Result<Backlog, String>>>>,
}

impl RelayHealth {
    /// Reads the backlog now and every `every` until `shutdown`.
    pub fn watch(&self, pool: DbPool, every: Duration, shutdown: CancellationToken) {
        let last = self.last.clone();
        tokio::spawn(async move {
            loop {
                let read = async {
                    let mut conn = pool.get().await?;
                    Ok::<_, db::DbError>(db::operator_view::outbox_backlog(&mut conn).await?)
                }
                .await
                .map_err(|e| crate::telemetry::error_chain(&e));
                *last.locked() = Some(read);
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
            }
        });
    }

    fn backlog(&self) -> Option<Result<Backlog, String>> {
        self.last.locked().clone()
    }
}

impl HealthReport for RelayHealth {
    fn health(&self) -> Result<serde_json::Value, String> {
        match self.backlog() {
            None => Ok(json!({ "status": "ok", "backlog": null })),
            Some(Ok(backlog)) => Ok(json!({
                "status": "ok",
                "backlog": backlog.pending,
                "oldest_secs": backlog.oldest_secs,
            })),
            Some(Err(error)) => Err(format!("database unavailable: {error}")),
        }
    }

    fn metrics(&self) -> String {
        let exposition = Exposition::new();
        if let Some(Ok(backlog)) = self.backlog() {
            exposition.outbox_backlog(backlog.pending, backlog.oldest_secs);
        }
        exposition
            .family(&*metrics::DELIVERIES)
            .family(&*metrics::DELIVERY_LAG_SECONDS);
        exposition.render()
    }
}
