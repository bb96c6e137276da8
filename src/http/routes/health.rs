//! Liveness (`/healthz`: the process answers) and readiness (`/readyz`: the database answers;
//! the body says whether the bucket does), for load balancers and orchestrators. A node is
//! ready without S3 because ingest into the spool needs only PostgreSQL; an operator who
//! wants otherwise sets `VIDQ_READY_REQUIRES_STORAGE`.

use std::time::Duration;

use actix_web::{HttpResponse, web};

use crate::app::AppContext;
use crate::http::dto::{HEALTH_OK, HealthDto, READY, ReadinessDto, UNAVAILABLE};

/// How long readiness waits for the database and the bucket. A probe must answer well inside
/// an orchestrator's probe timeout, whatever the storage call's own (longer) bounds are.
pub const READINESS_BUDGET: Duration = Duration::from_secs(3);

/// `check` within [`READINESS_BUDGET`], its error as text.
async fn within_budget<E>(
    check: impl std::future::Future<Output = Result<(), E>>,
    describe: impl Fn(E) -> String,
) -> Result<(), String> {
    match tokio::time::timeout(READINESS_BUDGET, check).await {
        Ok(result) => result.map_err(describe),
        Err(_) => Err(format!("no answer within {READINESS_BUDGET:?}")),
    }
}

/// `200` while the process serves requests.
#[utoipa::path(
    method(get, head),
    path = "/healthz",
    tag = "health",
    operation_id = "healthz",
    responses(
        (status = 200, description = "The process serves requests.", body = HealthDto),
        (status = 429, response = crate::http::openapi::TooManyRequests),
    ),
)]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(HealthDto { status: HEALTH_OK })
}

/// `200` while the database answers, its body naming storage `ok` or `unavailable`; `503`
/// when the database does not (or, with `VIDQ_READY_REQUIRES_STORAGE`, the bucket does not).
#[utoipa::path(
    method(get, head),
    path = "/readyz",
    tag = "health",
    operation_id = "readyz",
    responses(
        (status = 200, description = "The database answers; `storage` says whether the bucket does.", body = ReadinessDto),
        (status = 503, description = "The database does not answer (or the bucket does not, when storage is required).", body = ReadinessDto),
        (status = 429, response = crate::http::openapi::TooManyRequests),
    ),
)]
pub async fn readyz(ctx: web::Data<AppContext>) -> HttpResponse {
    let database = within_budget(
        async {
            let mut conn = ctx.db.get().await.map_err(|e| e.to_string())?;
            crate::db::session::ping(&mut conn)
                .await
                .map_err(|e| e.to_string())
        },
        |e| e,
    );
    let storage = within_budget(ctx.storage.check_bucket(), |e| {
        crate::telemetry::error_chain(&e)
    });
    let (database, storage) = tokio::join!(database, storage);
    // Details (hosts, users, buckets) go to the log only: this route needs no credentials.
    let verdict = |r: &Result<(), String>| match r {
        Ok(()) => HEALTH_OK,
        Err(_) => UNAVAILABLE,
    };
    let ready = database.is_ok() && (storage.is_ok() || !ctx.ready_requires_storage);
    let body = ReadinessDto {
        status: if ready { READY } else { UNAVAILABLE },
        database: verdict(&database),
        storage: verdict(&storage),
    };
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        tracing::warn!(database = ?database.err(), storage = ?storage.err(), "not ready");
        HttpResponse::ServiceUnavailable().json(body)
    }
}
