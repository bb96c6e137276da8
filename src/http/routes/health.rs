//! Liveness (`/healthz`: the process answers) and readiness (`/readyz`: the database and the
//! bucket answer too), for load balancers and orchestrators.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::app::AppContext;

/// `200` while the process serves requests.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// `200` when the database and the bucket both answer, else `503` naming what does not.
pub async fn readyz(ctx: web::Data<AppContext>) -> HttpResponse {
    let database = async {
        let mut conn = ctx.db.get().await.map_err(|e| e.to_string())?;
        crate::db::session::ping(&mut conn)
            .await
            .map_err(|e| e.to_string())
    };
    let storage = async {
        ctx.storage
            .check_bucket()
            .await
            .map_err(|e| crate::telemetry::error_chain(&e))
    };
    let (database, storage) = tokio::join!(database, storage);
    // Details (hosts, users, buckets) go to the log only: this route needs no credentials.
    let verdict = |r: &Result<(), String>| match r {
        Ok(()) => "ok",
        Err(_) => "unavailable",
    };
    let body = json!({
        "status": if database.is_ok() && storage.is_ok() { "ready" } else { "unavailable" },
        "database": verdict(&database),
        "storage": verdict(&storage),
    });
    if database.is_ok() && storage.is_ok() {
        HttpResponse::Ok().json(body)
    } else {
        tracing::warn!(database = ?database.err(), storage = ?storage.err(), "not ready");
        HttpResponse::ServiceUnavailable().json(body)
    }
}
