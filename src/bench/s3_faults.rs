//! An HTTP proxy in front of an S3 server that fails the way a real S3 and its network
//! fail: a PUT answered 503, a PUT stored and its answer lost (the connection dropped after
//! the object is written), a PUT that hangs before or after it is stored, and S3 down for a
//! while (every request 503). Requests are forwarded byte for byte (SigV4 signatures stay
//! valid: the Host header is kept), so the client under test is the real aws-sdk-s3 of a
//! real `vidq` process. `vidq bench chaos` puts its processes behind one; so do the tests.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::sync::Locked;

/// What the proxy does to one PUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `503 ServiceUnavailable`, nothing stored.
    Unavailable,
    /// `403 AccessDenied`: S3 is up and refuses this one request.
    Refused,
    /// Forwarded and stored, then the connection is dropped without an answer.
    LoseResponse,
    /// Never forwarded, never answered (the client's connection hangs).
    HangBeforeStore,
    /// Forwarded and stored, never answered.
    HangAfterStore,
}

#[derive(Default)]
struct State {
    plan: Mutex<VecDeque<Fault>>,
    down: AtomicBool,
    puts_seen: AtomicU32,
    puts_stored: AtomicU32,
    /// PUTs whose path ends with one of these are answered 503 (counted in `failed`).
    failing: Mutex<Vec<String>>,
    /// Requests of these methods are answered 405 and never forwarded.
    refused_methods: Mutex<Vec<String>>,
    failed: AtomicU32,
}

/// A running fault proxy.
pub struct S3Faults {
    /// The loopback port it listens on.
    pub port: u16,
    state: Arc<State>,
}

/// Headers about one connection, not the message: not forwarded.
const HOP_BY_HOP: [&str; 3] = ["connection", "transfer-encoding", "keep-alive"];

const UNAVAILABLE: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
<Error><Code>ServiceUnavailable</Code><Message>injected by the fault proxy</Message></Error>";

impl S3Faults {
    /// A proxy to the S3 server at `upstream` (`http://ip:port`); passes everything until told.
    ///
    /// # Panics
    /// When no loopback port can be had.
    pub async fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port for the S3 fault proxy");
        let port = listener.local_addr().expect("a bound port").port();
        let state = Arc::new(State::default());
        let client = reqwest::Client::new();
        let upstream = upstream.trim_end_matches('/').to_owned();
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (state, client, upstream) = (shared.clone(), client.clone(), upstream.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        handle(req, state.clone(), client.clone(), upstream.clone())
                    });
                    // An error from the service drops the connection without an answer.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(socket), service)
                        .await;
                });
            }
        });
        Self { port, state }
    }

    /// `http://127.0.0.1:PORT`, for `VIDQ_S3_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The next PUTs meet these faults, in order; later ones pass.
    pub fn plan(&self, faults: &[Fault]) {
        self.state.plan.locked().extend(faults.iter().copied());
    }

    /// PUTs whose path ends with `suffix` are answered 503, nothing stored, until
    /// [`S3Faults::heal`].
    pub fn fail_puts_ending(&self, suffix: &str) {
        self.state.failing.locked().push(suffix.to_owned());
    }

    /// PUTs of every path pass again.
    pub fn heal(&self) {
        self.state.failing.locked().clear();
    }

    /// PUTs refused by [`S3Faults::fail_puts_ending`].
    pub fn puts_failed(&self) -> u32 {
        self.state.failed.load(Ordering::SeqCst)
    }

    /// Requests of `method` are answered `405` and never forwarded, as by a proxy that
    /// passes only some methods (the proxy then stands in front of any HTTP server, not
    /// only S3).
    pub fn refuse_method(&self, method: &str) {
        self.state.refused_methods.locked().push(method.to_owned());
    }

    /// Every request is answered 503 while down.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// PUTs that reached the proxy (any outcome).
    pub fn puts_seen(&self) -> u32 {
        self.state.puts_seen.load(Ordering::SeqCst)
    }

    /// PUTs the proxy forwarded to S3 and S3 answered.
    pub fn puts_stored(&self) -> u32 {
        self.state.puts_stored.load(Ordering::SeqCst)
    }
}

fn unavailable() -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::SERVICE_UNAVAILABLE)
        .header("content-type", "application/xml")
        .body(Full::new(Bytes::from_static(UNAVAILABLE.as_bytes())))
        .expect("a static response")
}

fn refused() -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::FORBIDDEN)
        .header("content-type", "application/xml")
        .body(Full::new(Bytes::from_static(
            b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
<Error><Code>AccessDenied</Code><Message>injected by the fault proxy</Message></Error>",
        )))
        .expect("a static response")
}

#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by the fault proxy")
    }
}

impl std::error::Error for Dropped {}

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
    client: reqwest::Client,
    upstream: String,
) -> Result<Response<Full<Bytes>>, Dropped> {
    if state.down.load(Ordering::SeqCst) {
        return Ok(unavailable());
    }
    let method_refused = state
        .refused_methods
        .locked()
        .iter()
        .any(|m| m == req.method().as_str());
    if method_refused {
        return Ok(Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .body(Full::new(Bytes::new()))
            .expect("a static response"));
    }
    let is_put = req.method() == hyper::Method::PUT;
    if is_put {
        let path = req.uri().path();
        if state
            .failing
            .locked()
            .iter()
            .any(|s| path.ends_with(s.as_str()))
        {
            state.failed.fetch_add(1, Ordering::SeqCst);
            // The body is read first, as S3 does (see below).
            let _ = req.into_body().collect().await;
            return Ok(unavailable());
        }
    }
    let fault = if is_put {
        state.puts_seen.fetch_add(1, Ordering::SeqCst);
        state.plan.locked().pop_front()
    } else {
        None
    };
    // The body is read first, as S3 does: an answer before it would cut the client off
    // mid-send, and its HTTP client would resend the request on its own.
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| Dropped)?.to_bytes();
    match fault {
        Some(Fault::Unavailable) => return Ok(unavailable()),
        Some(Fault::Refused) => return Ok(refused()),
        Some(Fault::HangBeforeStore) => std::future::pending::<()>().await,
        _ => {}
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut forward = client.request(parts.method.clone(), format!("{upstream}{path}"));
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            forward = forward.header(name, value);
        }
    }
    let answer = forward.body(body).send().await.map_err(|_| Dropped)?;
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.map_err(|_| Dropped)?;
    if is_put && status.is_success() {
        state.puts_stored.fetch_add(1, Ordering::SeqCst);
    }
    match fault {
        Some(Fault::LoseResponse) => return Err(Dropped),
        Some(Fault::HangAfterStore) => std::future::pending::<()>().await,
        _ => {}
    }
    let mut response = Response::builder().status(status.as_u16());
    for (name, value) in &headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            response = response.header(name.as_str(), value.as_bytes());
        }
    }
    Ok(response
        .body(Full::new(bytes))
        .expect("headers copied from a valid response"))
}
