//! A webhook receiver for the tests: a real HTTP server on a loopback port that answers as
//! each test scripts it, verifies every delivery's signature with the `standardwebhooks`
//! crate (an implementation independent of vidq's), and records what arrived.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde_json::Value;
use tokio::sync::Notify;

/// How the receiver answers one request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Answer at once with this status.
    Status(u16),
    /// Answer with this status and a `Retry-After` header.
    RetryAfter(u16, &'static str),
    /// Answer 200 after this long (longer than the relay's timeout: a timeout).
    Slow(Duration),
}

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Arrival {
    /// `webhook-id`.
    pub id: String,
    /// The parsed body.
    pub body: Value,
    /// For each secret the receiver knows (in order), whether it verified the signature.
    pub verified: Vec<bool>,
    /// How many signatures the header carried.
    pub signatures: usize,
    /// When it arrived.
    pub at: Instant,
    /// What the receiver answered.
    pub reply: Reply,
}

type Script = Box<dyn Fn(&str, usize) -> Reply + Send + Sync>;

struct State {
    arrivals: Mutex<Vec<Arrival>>,
    secrets: Mutex<Vec<String>>,
    script: Mutex<Script>,
    arrived: Notify,
}

/// The running receiver.
pub struct Receiver {
    pub url: String,
    state: Arc<State>,
    handle: actix_web::dev::ServerHandle,
}

impl Receiver {
    /// Starts a receiver that answers 200 to everything.
    pub fn start() -> Self {
        let state = Arc::new(State {
            arrivals: Mutex::new(Vec::new()),
            secrets: Mutex::new(Vec::new()),
            script: Mutex::new(Box::new(|_, _| Reply::Status(200))),
            arrived: Notify::new(),
        });
        let data = web::Data::from(state.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route("/hooks", web::post().to(receive))
        })
        .listen(listener)
        .unwrap()
        .workers(1)
        .disable_signals()
        .shutdown_timeout(0)
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Self { url, state, handle }
    }

    /// Sets how the receiver answers: `script(event_id, nth_try_of_that_id)` (1-based).
    pub fn script(&self, script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) {
        *self.state.script.lock().unwrap() = Box::new(script);
    }

    /// Adds a secret to verify signatures with.
    pub fn trust(&self, secret: &str) {
        self.state.secrets.lock().unwrap().push(secret.to_owned());
    }

    /// Everything that arrived so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.state.arrivals.lock().unwrap().clone()
    }

    /// Waits until `done(arrivals)` holds, or panics after `within`.
    pub async fn wait_until(&self, within: Duration, done: impl Fn(&[Arrival]) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.state.arrived.notified();
            if done(&self.arrivals()) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "the receiver did not get what was expected within {within:?}; it got {:#?}",
                    self.arrivals()
                        .iter()
                        .map(|a| (&a.id, &a.body["type"], &a.reply))
                        .collect::<Vec<_>>()
                );
            }
        }
    }

    /// Waits until `n` deliveries were answered 2xx.
    pub async fn wait_for_delivered(&self, n: usize, within: Duration) {
        self.wait_until(within, |a| delivered(a).len() >= n).await;
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let handle = self.handle.clone();
        tokio::spawn(async move { handle.stop(false).await });
    }
}

/// The arrivals that were answered 2xx.
pub fn delivered(arrivals: &[Arrival]) -> Vec<&Arrival> {
    arrivals
        .iter()
        .filter(|a| matches!(a.reply, Reply::Status(200..=299)))
        .collect()
}

async fn receive(state: web::Data<State>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    // The verifier takes `http` 1 headers; actix hands us its own type.
    let mut headers = http::HeaderMap::new();
    for (name, value) in request.headers() {
        headers.append(
            http::HeaderName::from_bytes(name.as_str().as_bytes()).unwrap(),
            http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
        );
    }
    let verified = state
        .secrets
        .lock()
        .unwrap()
        .iter()
        .map(|secret| {
            standardwebhooks::Webhook::new(secret)
                .unwrap()
                .verify(&body, &headers)
                .is_ok()
        })
        .collect();
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let id = header("webhook-id");
    let signatures = header("webhook-signature").split(' ').count();
    let reply = {
        let mut arrivals = state.arrivals.lock().unwrap();
        let nth = arrivals.iter().filter(|a| a.id == id).count() + 1;
        let reply = (state.script.lock().unwrap())(&id, nth);
        arrivals.push(Arrival {
            id,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
            verified,
            signatures,
            at: Instant::now(),
            reply: reply.clone(),
        });
        reply
    };
    state.arrived.notify_waiters();
    match reply {
        Reply::Status(code) => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(code).unwrap()).finish()
        }
        Reply::RetryAfter(code, after) => {
            HttpResponse::build(actix_web::http::StatusCode::from_u16(code).unwrap())
                .insert_header(("retry-after", after))
                .finish()
        }
        Reply::Slow(delay) => {
            // The slow receiver the test scripted.
            tokio::time::sleep(delay).await;
            HttpResponse::Ok().finish()
        }
    }
}
