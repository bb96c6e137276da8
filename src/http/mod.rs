//! The HTTP API (actix-web): routes, request/response types, authentication and the one
//! table from error kinds to status codes.
//!
//! The server is built from a listener, so tests run the real server on port 0, and it stops
//! when the shared cancellation token is cancelled.

pub mod access_log;
pub mod admin;
pub mod auth;
pub mod cors;
pub mod dto;
pub mod error;
pub mod error_code;
pub mod health_listener;
pub mod ingest_server;
pub mod json;
pub mod limits;
pub mod openapi;
pub mod page;
pub mod route_log;
pub mod routes;

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::http::header;
use actix_web::middleware::{ErrorHandlerResponse, ErrorHandlers, from_fn};
use actix_web::{App, HttpServer, ResponseError, web};
use tokio_util::sync::CancellationToken;

use crate::app::AppContext;
use crate::config::HttpLimits;
use error::ApiError;

/// [`serve_with`] the default limits.
pub fn serve(
    listener: std::net::TcpListener,
    ctx: AppContext,
    shutdown: CancellationToken,
) -> std::io::Result<actix_web::dev::Server> {
    serve_with(listener, ctx, HttpLimits::default(), shutdown)
}

/// Builds the API server on `listener`. Await the returned server to run it; it stops
/// gracefully (in-flight requests finish, 10 s at most) once `shutdown` is cancelled.
pub fn serve_with(
    listener: std::net::TcpListener,
    ctx: AppContext,
    limits: HttpLimits,
    shutdown: CancellationToken,
) -> std::io::Result<actix_web::dev::Server> {
    let data = web::Data::new(ctx);
    let connections = limits::ConnectionCounter::default();
    let (body_idle, max_connections) = (limits.body_idle, limits.max_connections_per_ip);
    let cors_origins = limits.cors.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(web::QueryConfig::default().error_handler(|_, req| {
                ApiError::bad_request(describe_query_error(req.query_string())).into()
            }))
            .wrap(ErrorHandlers::new().default_handler(json_body_for_bare_errors))
            .wrap(from_fn(move |req, next| {
                limits::enforce(body_idle, max_connections, req, next)
            }))
            .wrap({
                let origins = cors_origins.clone();
                from_fn(move |req, next| cors::cors(origins.clone(), req, next))
            })
            .wrap(from_fn(access_log::log))
            .configure(routes::configure)
            .configure(admin::configure)
            .configure(page::configure)
            .default_service(web::to(|| async {
                Err::<actix_web::HttpResponse, _>(ApiError::not_found())
            }))
    })
    .on_connect(limits::on_connect(connections, max_connections))
    .listen(listener)?
    .disable_signals()
    .shutdown_timeout(10)
    .run();
    stop_on(&server, shutdown);
    Ok(server)
}

/// Gives an error answer the HTTP layer made without a body (a 405 from routing, with its
/// `Allow` header) the JSON error shape every other error has.
fn json_body_for_bare_errors<B: MessageBody + 'static>(
    res: ServiceResponse<B>,
) -> actix_web::Result<ErrorHandlerResponse<B>> {
    if res.response().headers().contains_key(header::CONTENT_TYPE) {
        return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
    }
    let (req, bare) = res.into_parts();
    let mut json = ApiError::for_status(bare.status()).error_response();
    for (name, value) in bare.headers() {
        if !json.headers().contains_key(name) {
            json.headers_mut().insert(name.clone(), value.clone());
        }
    }
    Ok(ErrorHandlerResponse::Response(
        ServiceResponse::new(req, json).map_into_right_body(),
    ))
}

/// Query parameters that take a whole number (`limit` may be negative: the handler says
/// what range it takes).
const NUMERIC_PARAMS: [&str; 2] = ["limit", "wait"];

/// A query that does not parse, said without serde's Rust type names. serde names no field,
/// so the numeric parameter whose value is not a number is found in the query itself.
fn describe_query_error(query: &str) -> String {
    let bad_number = url::form_urlencoded::parse(query.as_bytes()).find(|(name, value)| {
        NUMERIC_PARAMS.contains(&name.as_ref())
            && value.parse::<u64>().is_err()
            && (name != "limit" || value.parse::<i64>().is_err())
    });
    match bad_number {
        Some((name, _)) => format!("the query parameter `{name}` must be a whole number"),
        None => "the query string is malformed".to_owned(),
    }
}

/// Stops `server` gracefully once `shutdown` is cancelled.
pub(crate) fn stop_on(server: &actix_web::dev::Server, shutdown: CancellationToken) {
    let handle = server.handle();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        handle.stop(true).await;
    });
}
