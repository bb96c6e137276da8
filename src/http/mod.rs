//! The HTTP API (actix-web): routes, request/response types, authentication and the one
//! table from error kinds to status codes.
//!
//! The server is built from a listener, so tests run the real server on port 0, and it stops
//! when the shared cancellation token is cancelled.

pub mod auth;
pub mod dto;
pub mod error;
pub mod routes;
pub mod worker_health;

use actix_web::{App, HttpServer, middleware, web};
use tokio_util::sync::CancellationToken;

use crate::app::AppContext;
use error::ApiError;

/// Largest JSON body the API reads (requests are small; uploads go straight to S3).
const JSON_LIMIT: usize = 64 * 1024;

/// Builds the API server on `listener`. Await the returned server to run it; it stops
/// gracefully (in-flight requests finish, 10 s at most) once `shutdown` is cancelled.
pub fn serve(
    listener: std::net::TcpListener,
    ctx: AppContext,
    shutdown: CancellationToken,
) -> std::io::Result<actix_web::dev::Server> {
    let data = web::Data::new(ctx);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(
                web::JsonConfig::default()
                    .limit(JSON_LIMIT)
                    .error_handler(|err, _| {
                        ApiError::bad_request(format!("invalid JSON body: {err}")).into()
                    }),
            )
            .app_data(web::QueryConfig::default().error_handler(|err, _| {
                ApiError::bad_request(format!("invalid query: {err}")).into()
            }))
            .wrap(middleware::Logger::new("%r -> %s in %Dms").log_target("vidq::http"))
            .configure(routes::configure)
            .default_service(web::to(|| async {
                Err::<actix_web::HttpResponse, _>(ApiError::not_found())
            }))
    })
    .listen(listener)?
    .disable_signals()
    .shutdown_timeout(10)
    .run();
    stop_on(&server, shutdown);
    Ok(server)
}

/// Stops `server` gracefully once `shutdown` is cancelled.
pub(crate) fn stop_on(server: &actix_web::dev::Server, shutdown: CancellationToken) {
    let handle = server.handle();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        handle.stop(true).await;
    });
}
