//! Each long-running process reports itself every few seconds (a `nodes` row: role, node,
//! slots, what only it knows), so the dashboard can show who is alive and what each does.
//! A failed report is logged and retried on the next tick; nothing else depends on it.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::db::{self, DbPool};

/// How often a process reports.
pub const REPORT_EVERY: Duration = Duration::from_secs(5);

/// Rows of processes silent this long are deleted by the API's reports.
const FORGET_AFTER: Duration = Duration::from_secs(24 * 3600);

/// What a process reports about itself.
pub struct Presence {
    /// `api`, `worker`, `relay` or `sweeper`.
    pub role: &'static str,
    /// Its node id.
    pub node_id: String,
    /// What it runs at once (a worker's slots, a relay's sends).
    pub slots: u32,
    /// Read at each report (a worker's running attempts, a sweeper's breaker).
    pub detail: Arc<dyn Fn() -> serde_json::Value + Send + Sync>,
}

/// Reports now and every [`REPORT_EVERY`] until `shutdown`.
pub fn spawn(pool: DbPool, presence: Presence, shutdown: CancellationToken) {
    let started_at = chrono::Utc::now();
    tokio::spawn(async move {
        let slots = i32::try_from(presence.slots).unwrap_or(i32::MAX);
        loop {
            let detail = (presence.detail)();
            let reported = async {
                let mut conn = pool.get().await?;
                db::nodes::report(
                    &mut conn,
                    presence.role,
                    &presence.node_id,
                    slots,
                    started_at,
                    &detail,
                )
                .await?;
                if presence.role == "api" {
                    db::nodes::forget_silent(&mut conn, FORGET_AFTER.as_secs_f64()).await?;
                }
                Ok::<_, db::DbError>(())
            }
            .await;
            if let Err(error) = reported {
                tracing::debug!(error = %crate::telemetry::error_chain(&error), "could not report this node");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(REPORT_EVERY) => {}
            }
        }
    });
}

/// The detail of a role whose health listener answers with a JSON body: that body, or the
/// reason it is unhealthy.
pub fn from_health(
    health: Arc<dyn crate::http::health_listener::HealthReport>,
) -> Arc<dyn Fn() -> serde_json::Value + Send + Sync> {
    Arc::new(move || match health.health() {
        Ok(fields) => fields,
        Err(reason) => serde_json::json!({ "status": "unhealthy", "reason": reason }),
    })
}
