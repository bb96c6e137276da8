//! The worker's optional health listener, on a loopback address only (a worker opens no
//! public port): `GET /healthz` answers 200 while the claim loop turns and the database
//! answers, 503 with the reason otherwise; `GET /metrics` gives its counters in Prometheus'
//! text format. It reads what the claim loop records and never queries the database itself,
//! so probing it costs the queue nothing.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::queue::health::{Verdict, WorkerHealth};

/// What the listener reports on.
struct Probe {
    health: Arc<WorkerHealth>,
    slots: u32,
    /// Longer than this without a turn of the claim loop is a stall.
    stall: Duration,
}

/// Parses a `--health-listen` address, refusing anything but loopback.
pub fn loopback_addr(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("`{text}` is not an address with a port, e.g. 127.0.0.1:9091"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "the worker's health listener binds to loopback only (127.0.0.1 or [::1]); `{text}` is not"
        ));
    }
    Ok(addr)
}

/// Serves `/healthz` and `/metrics` on `listener` until `shutdown`. A loop that has not
/// come round for three poll intervals plus the pool's 10 s connection wait is stalled.
pub fn serve(
    listener: TcpListener,
    health: Arc<WorkerHealth>,
    slots: u32,
    poll: Duration,
    shutdown: CancellationToken,
) -> std::io::Result<actix_web::dev::Server> {
    let probe = web::Data::new(Probe {
        health,
        slots,
        stall: poll * 3 + Duration::from_secs(10),
    });
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

async fn healthz(probe: web::Data<Probe>) -> HttpResponse {
    match probe.health.verdict(probe.stall) {
        Verdict::Healthy => HttpResponse::Ok().json(json!({
            "status": "ok",
            "running": probe.health.running(),
            "slots": probe.slots,
        })),
        Verdict::Unhealthy(reason) => HttpResponse::ServiceUnavailable()
            .json(json!({ "status": "unhealthy", "reason": reason })),
    }
}

async fn metrics(probe: web::Data<Probe>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(probe.health.metrics(probe.slots))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_accepted() {
        assert!(loopback_addr("127.0.0.1:9091").is_ok());
        assert!(loopback_addr("[::1]:9091").is_ok());
        assert!(
            loopback_addr("0.0.0.0:9091")
                .unwrap_err()
                .contains("loopback only")
        );
        assert!(
            loopback_addr("10.0.0.5:9091")
                .unwrap_err()
                .contains("loopback only")
        );
        assert!(
            loopback_addr("localhost")
                .unwrap_err()
                .contains("with a port")
        );
    }
}
