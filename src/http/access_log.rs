//! One access-log line per request, at a level that follows what the line is worth: probes
//! (`/healthz`, `/readyz`, `/metrics`) at TRACE, so a load balancer polling them (or `wrk`)
//! does not fill the disk; successes at DEBUG; client errors at INFO; server errors at WARN
//! (their cause is logged once, at ERROR, where it is known). Target `vidq::http::access`.
//! The same measurement feeds the request counter and latency histogram of `/metrics`,
//! labelled by route pattern (never the raw path: ids would make a series per video).

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use tracing::Level;

/// The path as an access log line may show it: every segment that is a credential is
/// replaced by `…`. Stream keys and API keys (`vidq_` and 64 hex digits) are credentials
/// wherever they appear, which covers an encoder pointed at the wrong port with its key in
/// the path; so is whatever follows the live ingest prefix. Query strings (playback tokens,
/// presigned signatures) are never logged at all.
pub fn redact(path: &str) -> String {
    const INGEST: &str = "/v1/live/ingest/";
    let (head, keyed) = match path.strip_prefix(INGEST) {
        // The first segment after the prefix is the stream key, whatever it looks like.
        Some(rest) => match rest.split_once('/') {
            Some((_, name)) => return format!("{INGEST}…/{}", redact_keys(name)),
            None => return format!("{INGEST}…"),
        },
        None => ("", path),
    };
    format!("{head}{}", redact_keys(keyed))
}

/// `path` with each segment that looks like a vidq key replaced by `…`.
fn redact_keys(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if crate::domain::api_key::looks_like_key(segment) {
                "…"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Paths probed by machines, not called by clients.
const PROBES: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The level of a request's access line.
pub fn level(path: &str, status: StatusCode) -> Level {
    if PROBES.contains(&path) {
        Level::TRACE
    } else if status.is_server_error() {
        Level::WARN
    } else if status.is_client_error() {
        Level::INFO
    } else {
        Level::DEBUG
    }
}

/// The method as a metrics label: the standard ones by name, any other token a client
/// makes up as `OTHER`, so nobody can grow the series without bound.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// Middleware: logs method, path, status and duration after the response is made.
pub async fn log(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let started = Instant::now();
    let method = req.method().clone();
    let path = redact(req.path());
    let route = req
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let result = next.call(req).await;
    let status = match &result {
        Ok(response) => response.status(),
        Err(err) => err.as_response_error().status_code(),
    };
    let took = started.elapsed();
    let method_label = method_label(&method);
    crate::metrics::HTTP_REQUESTS
        .with_label_values(&[route.as_str(), method_label, status.as_str()])
        .inc();
    crate::metrics::HTTP_SECONDS
        .with_label_values(&[route.as_str(), method_label])
        .observe(took.as_secs_f64());
    super::route_log::record(method.as_str(), &route, status.as_u16());
    let ms = took.as_millis();
    macro_rules! line {
        ($level:expr) => {
            tracing::event!(target: "vidq::http::access", $level, %method, %path, status = status.as_u16(), ms, "request")
        };
    }
    match level(&path, status) {
        Level::TRACE => line!(Level::TRACE),
        Level::DEBUG => line!(Level::DEBUG),
        Level::INFO => line!(Level::INFO),
        _ => line!(Level::WARN),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_reach_a_log_line() {
        let key = format!("vidq_{}", "ab".repeat(32));
        assert_eq!(
            redact(&format!("/v1/live/ingest/{key}/index.m3u8")),
            "/v1/live/ingest/…/index.m3u8"
        );
        assert_eq!(redact("/v1/live/ingest/anything"), "/v1/live/ingest/…");
        assert_eq!(redact(&format!("/live/{key}")), "/live/…");
        assert_eq!(redact(&format!("/x/{key}.m3u8")), "/x/…");
        let video = "/v1/videos/01a24604-ccc9-72b2-929e-718ad50681a6";
        assert_eq!(redact(video), video);
        assert_eq!(redact("/v1/vidq_tools"), "/v1/vidq_tools");
    }

    #[test]
    fn made_up_methods_share_one_metrics_label() {
        use actix_web::http::Method;
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(
            method_label(&Method::from_bytes(b"FOO123").unwrap()),
            "OTHER"
        );
        assert_eq!(
            method_label(&Method::from_bytes(b"PROPFIND").unwrap()),
            "OTHER"
        );
    }

    #[test]
    fn probes_are_quiet_and_client_errors_are_never_errors() {
        assert_eq!(level("/healthz", StatusCode::OK), Level::TRACE);
        assert_eq!(
            level("/readyz", StatusCode::SERVICE_UNAVAILABLE),
            Level::TRACE
        );
        assert_eq!(level("/v1/videos", StatusCode::OK), Level::DEBUG);
        for status in [
            StatusCode::BAD_REQUEST,
            StatusCode::NOT_FOUND,
            StatusCode::PAYLOAD_TOO_LARGE,
        ] {
            assert_eq!(level("/v1/uploads", status), Level::INFO);
        }
        assert_eq!(
            level("/v1/uploads", StatusCode::SERVICE_UNAVAILABLE),
            Level::WARN
        );
    }
}
