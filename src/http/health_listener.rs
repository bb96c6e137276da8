//! The optional health listener of the background roles (worker, sweeper), on a loopback
//! address only (they open no public port): `GET /healthz` answers 200 while the role's loop
//! turns and the database answers, 503 with the reason otherwise; `GET /metrics` gives its
//! counters in Prometheus' text format. It reads what the loop records and never queries
//! the database itself, so probing it costs the loop nothing.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::telemetry::worker_health::{Verdict, WorkerHealth};

/// What a role tells its health listener.
pub trait HealthReport: Send + Sync + 'static {
    /// The fields of a 200 answer, or why the role is unhealthy (503).
    fn health(&self) -> Result<serde_json::Value, String>;
    /// Its counters, in Prometheus' text format.
    fn metrics(&self) -> String;
}

/// A worker: its claim loop's account, its slots, and how long a turn may take.
pub struct WorkerHealthReport {
    /// What the claim loop records.
    pub health: Arc<WorkerHealth>,
    /// Attempts it runs at once.
    pub slots: u32,
    /// Longer than this without a turn of the claim loop is a stall.
    pub stall: Duration,
}

impl WorkerHealthReport {
    /// A loop that has not come round for three poll intervals plus the pool's 10 s
    /// connection wait is stalled.
    pub fn new(health: Arc<WorkerHealth>, slots: u32, poll: Duration) -> Self {
        Self {
            health,
            slots,
            stall: poll * 3 + Duration::from_secs(10),
        }
    }
}

impl HealthReport for WorkerHealthReport {
    fn health(&self) -> Result<serde_json::Value, String> {
        match self.health.verdict(self.stall) {
            Verdict::Healthy => Ok(json!({
                "status": "ok",
                "running": self.health.running(),
                "slots": self.slots,
            })),
            Verdict::Unhealthy(reason) => Err(reason),
        }
    }

    fn metrics(&self) -> String {
        self.health.metrics(self.slots)
    }
}

/// Serves `/healthz` and `/metrics` on `listener` until `shutdown`.
pub fn serve(
    listener: TcpListener,
    probe: Arc<dyn HealthReport>,
    shutdown: CancellationToken,
) -> std::io::Result<actix_web::dev::Server> {
    let probe: web::Data<dyn HealthReport> = web::Data::from(probe);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(probe.clone())
            .route("/healthz", web::get().to(healthz))
            .route("/metrics", web::get().to(metrics))
    })
    .workers(1)
    .listen(listener)?
    .disable_signals()
    .shutdown_timeout(1)
    .run();
    super::stop_on(&server, shutdown);
    Ok(server)
}

async fn healthz(probe: web::Data<dyn HealthReport>) -> HttpResponse {
    match probe.health() {
        Ok(fields) => HttpResponse::Ok().json(fields),
        Err(reason) => HttpResponse::ServiceUnavailable()
            .json(json!({ "status": "unhealthy", "reason": reason })),
    }
}

async fn metrics(probe: web::Data<dyn HealthReport>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(probe.metrics())
}
