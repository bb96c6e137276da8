//! `GET /metrics` of the API: its HTTP requests by route, status and latency, and the
//! cluster's state read from the database at scrape time (queue depth by status, the oldest
//! waiting job, the outbox backlog, the sweepers' backlog, open recordings), and under
//! `vidq dev` the in-process worker's families. Aggregates only, no user's data; it needs
//! no key, like `/healthz` (keep it off the public edge).

use actix_web::{HttpResponse, web};

use crate::app::AppContext;
use crate::db::{self, operator_view};
use crate::domain::job::JobStatus;
use crate::metrics::{self, Exposition};

/// The database's part of a scrape.
struct ClusterState {
    queue: Vec<operator_view::StatusCount>,
    oldest_pending: Option<f64>,
    outbox: operator_view::Backlog,
    sweep: Vec<operator_view::SweepBacklog>,
    recordings: i64,
}

async fn read(ctx: &AppContext) -> Result<ClusterState, db::DbError> {
    let mut conn = ctx.db.get().await?;
    Ok(ClusterState {
        queue: operator_view::queue_by_status(&mut conn).await?,
        oldest_pending: operator_view::oldest_pending_secs(&mut conn).await?,
        outbox: operator_view::outbox_backlog(&mut conn).await?,
        sweep: operator_view::sweep_backlog(&mut conn).await?,
        recordings: operator_view::open_recordings_count(&mut conn).await?,
    })
}

/// Prometheus' text format. A database that does not answer leaves its families out and
/// sets `vidq_database_up` to 0, so the scrape itself still works.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    operation_id = "metrics",
    responses(
        (status = 200, description = "Prometheus' text exposition format.", body = String,
            content_type = "text/plain; version=0.0.4"),
        (status = 429, response = crate::http::openapi::TooManyRequests),
    ),
)]
pub async fn metrics(ctx: web::Data<AppContext>) -> HttpResponse {
    let exposition = Exposition::new();
    let state = read(&ctx).await;
    if let Err(error) = &state {
        tracing::warn!(error = %crate::telemetry::error_chain(error), "metrics: the database did not answer");
    }
    exposition.gauge(
        "vidq_database_up",
        "1 if the database answered this scrape's reads.",
        f64::from(u8::from(state.is_ok())),
    );
    if let Ok(state) = state {
        exposition.outbox_backlog(state.outbox.pending, state.outbox.oldest_secs);
        exposition
            .gauge_by(
                "vidq_queue_jobs",
                "Encoding jobs waiting, running or dead, by status.",
                "status",
                state
                    .queue
                    .iter()
                    .filter(|s| s.status != JobStatus::Completed)
                    .map(|s| (s.status.as_str(), s.count as f64)),
            )
            .gauge(
                "vidq_queue_completed_last_hour",
                "Encoding jobs finished (READY or FAILED) in the last hour.",
                state
                    .queue
                    .iter()
                    .find(|s| s.status == JobStatus::Completed)
                    .map_or(0.0, |s| s.count as f64),
            )
            .gauge(
                "vidq_queue_oldest_pending_seconds",
                "Seconds the oldest claimable PENDING job has waited (0: none waits).",
                state.oldest_pending.unwrap_or(0.0),
            )
            .gauge_by(
                "vidq_sweep_backlog",
                "Rows a sweeper still has to land in S3, by ledger axis (upload, init, segment, original).",
                "axis",
                state.sweep.iter().map(|s| (s.axis.as_str(), s.pending as f64)),
            )
            .gauge(
                "vidq_live_recordings_open",
                "Recordings waiting, live, ending or ended without their video yet.",
                state.recordings as f64,
            );
    }
    exposition
        .family(&*metrics::HTTP_REQUESTS)
        .family(&*metrics::HTTP_SECONDS)
        .family(&*metrics::CONFIRM_BATCH_SIZE)
        .family(&*metrics::STATUS_READ_BATCH_SIZE)
        .family(&*metrics::LIVE_FILES_LOST)
        .family(&*metrics::UPLOAD_BODY_BYTES);
    let mut body = exposition.render();
    // Its families are named `vidq_worker_*` or are the worker's own histograms, none of
    // which the API registers above, so the two texts join into one valid exposition.
    if let Some(worker) = &ctx.in_process_worker {
        body.push_str(&worker.health.metrics(worker.slots));
    }
    HttpResponse::Ok()
        .content_type(metrics::CONTENT_TYPE)
        .body(body)
}
