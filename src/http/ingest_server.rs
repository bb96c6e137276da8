//! The live ingest listener (`VIDQ_INGEST_ADDR`): `PUT` and `DELETE`
//! `/v1/live/ingest/{stream_key}/{name}`, on a listener of its own.
//!
//! An HLS encoder sends each file whole and shuts its side of the connection at once
//! (FFmpeg's `-method PUT` does), then waits for the answer. The API's HTTP server treats
//! that half-close as the end of the connection and drops the part of the body it has not
//! read yet, so a large segment arrives cut short. This listener reads each request to its
//! end whatever the client does with its write side (HTTP/1.1 half-close support), and hands
//! the body to the same use-case in constant memory.
//!
//! It keeps the API port's limits: at most `max_connections_per_ip` connections from one
//! address (one more is closed as soon as it is accepted) and [`MAX_CONNECTIONS`] in all, a
//! request head within [`HEADER_READ_TIMEOUT`], and a body that moves at least
//! [`MIN_PROGRESS_BYTES`] every `body_idle`, so nobody can hold the listener's connections
//! or the spool's writers with idle or trickling requests.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use crate::app::ReceiveError;
use crate::app::ingest::BodyError;
use crate::app::live::Ingested;
use crate::app::{self, AppContext};
use crate::domain::recording::FileState;
use crate::http::error::ApiError;
use crate::http::limits::{AcceptGate, MIN_PROGRESS_BYTES};
use crate::sync::ReadWriteLocked;

/// What one client may hold on the ingest listener (the API port's limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IngestLimits {
    /// A body that moves fewer than [`MIN_PROGRESS_BYTES`] in this long is cut.
    pub body_idle: Duration,
    /// Open connections per client address.
    pub max_connections_per_ip: u32,
}

impl From<&crate::config::HttpLimits> for IngestLimits {
    fn from(limits: &crate::config::HttpLimits) -> Self {
        Self {
            body_idle: limits.body_idle,
            max_connections_per_ip: limits.max_connections_per_ip,
        }
    }
}

/// The path every ingest URL starts with.
pub const PREFIX: &str = "/v1/live/ingest/";

/// Connections the listener serves at once; one more is closed as soon as it is accepted
/// (an encoder retries its PUT). A broadcast holds one or two at a time.
pub const MAX_CONNECTIONS: usize = 1024;

/// A connection that has not sent a whole request head this long after it opened (or after
/// its previous request) is closed: idle or trickling clients cannot hold the slots.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Stand-ins for stream keys in ingest paths: a listener given these takes only them, each
/// for the key it stands for. The RTMP streams' FFmpeg children PUT under one, so no stream
/// key is on a command line (which any local user can read).
pub type KeyAliases = std::sync::Arc<std::sync::RwLock<std::collections::HashMap<String, String>>>;

/// Serves the ingest listener until `shutdown`.
pub fn serve(
    listener: tokio::net::TcpListener,
    ctx: AppContext,
    limits: IngestLimits,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    serve_aliased(listener, ctx, limits, None, shutdown)
}

/// [`serve`], taking only the stand-ins of `aliases` for keys when given.
pub fn serve_aliased(
    listener: tokio::net::TcpListener,
    ctx: AppContext,
    limits: IngestLimits,
    aliases: Option<KeyAliases>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let body_idle = limits.body_idle;
    tokio::spawn(async move {
        let gate = AcceptGate::new(
            "live ingest",
            MAX_CONNECTIONS,
            limits.max_connections_per_ip,
        );
        while let Some((socket, _, admitted)) = gate.accept(&listener, &shutdown).await {
            let ctx = ctx.clone();
            let stop = shutdown.clone();
            let aliases = aliases.clone();
            tokio::spawn(async move {
                let _admitted = admitted;
                let service = hyper::service::service_fn(move |req| {
                    let ctx = ctx.clone();
                    let aliases = aliases.clone();
                    async move {
                        Ok::<_, Infallible>(handle(&ctx, req, body_idle, aliases.as_ref()).await)
                    }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .half_close(true)
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(socket), service);
                tokio::select! {
                    _ = conn => {}
                    () = stop.cancelled() => {}
                }
            });
        }
    })
}

async fn handle(
    ctx: &AppContext,
    req: Request<Incoming>,
    body_idle: Duration,
    aliases: Option<&KeyAliases>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let routed = route(&path).and_then(|(key, name)| match aliases {
        None => Some((key.to_owned(), name)),
        Some(aliases) => aliases
            .read_locked()
            .get(key)
            .map(|key| (key.clone(), name)),
    });
    let answer = match routed {
        None => Err(ApiError::not_found()),
        Some((key, name)) if method == Method::PUT => {
            let length = req
                .headers()
                .get(hyper::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            let body = body_stream(req.into_body(), body_idle);
            match app::live::ingest(ctx, &key, name, length, body).await {
                Ok(Ingested::File(FileState::Excluded)) => Err(ApiError::excluded()),
                Ok(Ingested::File(_)) => Ok(201),
                Ok(Ingested::AlreadyLanded) => Ok(200),
                Ok(Ingested::Playlist { .. }) => Ok(204),
                // A segment has no offset to resume from: it is sent again whole.
                Err(crate::app::AppError::Receive(ReceiveError::BodyInterrupted(
                    crate::app::ingest::BodyError::Broken,
                ))) => Err(ApiError::body_interrupted(
                    "the request body ended early; nothing of this file was kept: PUT it again",
                )),
                Err(error) => Err(error.into()),
            }
        }
        // FFmpeg deletes old segments with `-hls_flags delete_segments`; vidq keeps every
        // file of a recording, so a DELETE is acknowledged and changes nothing.
        Some(_) if method == Method::DELETE => Ok(204),
        Some(_) => Err(ApiError::for_status(
            actix_web::http::StatusCode::METHOD_NOT_ALLOWED,
        )),
    };
    let status = match &answer {
        Ok(status) => *status,
        Err(error) => error.status_u16(),
    };
    tracing::debug!(target: "vidq::http::access", method = %method, path = %super::access_log::redact(&path), status, "ingest request");
    match answer {
        Ok(status) => Response::builder()
            .status(status)
            .body(Full::new(Bytes::new()))
            .expect("a plain answer builds"),
        Err(error) => Response::builder()
            .status(error.status_u16())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(error.body_json())))
            .expect("an error answer builds"),
    }
}

/// `{stream_key}` and `{name}` of an ingest path; `None` for any other path.
fn route(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix(PREFIX)?;
    let (key, name) = rest.split_once('/')?;
    (!key.is_empty()).then_some((key, name))
}

/// The body as the use-case reads it; a body that sends fewer than [`MIN_PROGRESS_BYTES`]
/// within `idle` (nothing, or a byte now and then) ends with [`BodyError::Idle`].
fn body_stream(
    body: Incoming,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, BodyError>> + Unpin {
    /// The body, when its current window of `idle` ends, and what arrived in that window.
    struct Progress {
        body: Incoming,
        deadline: tokio::time::Instant,
        bytes: usize,
    }
    let start = Progress {
        body,
        deadline: tokio::time::Instant::now() + idle,
        bytes: 0,
    };
    Box::pin(futures_util::stream::unfold(
        Some(start),
        move |progress| async move {
            let mut progress = progress?;
            loop {
                let frame = tokio::time::timeout_at(progress.deadline, progress.body.frame());
                let frame = match frame.await {
                    Err(_) => return Some((Err(BodyError::Idle), None)),
                    Ok(None) => return None,
                    Ok(Some(Err(_))) => return Some((Err(BodyError::Broken), None)),
                    Ok(Some(Ok(frame))) => frame,
                };
                if let Ok(data) = frame.into_data() {
                    progress.bytes += data.len();
                    if progress.bytes >= MIN_PROGRESS_BYTES {
                        progress.deadline = tokio::time::Instant::now() + idle;
                        progress.bytes = 0;
                    }
                    return Some((Ok(data), Some(progress)));
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::access_log::redact;

    #[test]
    fn only_ingest_paths_route_and_their_keys_stay_out_of_the_log() {
        assert_eq!(
            route("/v1/live/ingest/vidq_k/index0.m4s"),
            Some(("vidq_k", "index0.m4s"))
        );
        assert_eq!(route("/v1/live/ingest/vidq_k/"), Some(("vidq_k", "")));
        assert_eq!(route("/v1/live/ingest//x.mp4"), None);
        assert_eq!(route("/v1/videos"), None);
        assert_eq!(
            redact("/v1/live/ingest/vidq_secret/init.mp4"),
            "/v1/live/ingest/…/init.mp4"
        );
        assert_eq!(redact("/v1/live/ingest/vidq_secret"), "/v1/live/ingest/…");
        assert_eq!(redact("/v1/videos"), "/v1/videos");
    }
}
