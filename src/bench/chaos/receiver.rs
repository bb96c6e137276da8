//! The application backend's side of the soak: a webhook endpoint on a loopback port that
//! verifies every delivery's signature with the endpoint's secret and records which event
//! ids arrived and how often (a retry repeats the id; a second event for one fact would not).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};

use crate::domain::signature::WebhookSecret;
use crate::sync::Locked;

/// What arrived.
#[derive(Default)]
pub struct Arrivals {
    /// Event id (`webhook-id`) to the number of verified deliveries of it.
    pub verified: HashMap<String, u32>,
    /// Deliveries whose signature did not verify, or that carried no id.
    pub bad: u32,
    /// Verified `video.ready` event ids.
    ready: HashSet<String>,
}

#[derive(Default)]
struct State {
    secret: Mutex<Option<WebhookSecret>>,
    arrivals: Mutex<Arrivals>,
    /// Distinct verified `video.ready` events.
    ready: Arc<AtomicU32>,
}

/// A running receiver.
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hook`.
    pub url: String,
    state: Arc<State>,
    server: actix_web::dev::ServerHandle,
}

impl Receiver {
    /// Starts it on a free loopback port.
    pub fn start() -> anyhow::Result<Self> {
        let state = Arc::new(State::default());
        let data = web::Data::from(state.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route("/hook", web::post().to(receive))
        })
        .workers(1)
        .bind("127.0.0.1:0")?;
        let port = server.addrs()[0].port();
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Self {
            url: format!("http://127.0.0.1:{port}/hook"),
            state,
            server: handle,
        })
    }

    /// Verifies deliveries with `secret` from now on (the endpoint's, given at creation).
    pub fn trust(&self, secret: WebhookSecret) {
        *self.state.secret.locked() = Some(secret);
    }

    /// The number of distinct `video.ready` events verified so far, kept up to date.
    pub fn ready(&self) -> Arc<AtomicU32> {
        self.state.ready.clone()
    }

    /// A copy of what arrived so far.
    pub fn arrivals(&self) -> Arrivals {
        let arrivals = self.state.arrivals.locked();
        Arrivals {
            verified: arrivals.verified.clone(),
            bad: arrivals.bad,
            ready: HashSet::new(),
        }
    }

    /// Stops the server.
    pub async fn stop(self) {
        self.server.stop(true).await;
    }
}

async fn receive(state: web::Data<State>, request: HttpRequest, body: web::Bytes) -> HttpResponse {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (id, timestamp, signatures) = (
        header("webhook-id"),
        header("webhook-timestamp").and_then(|t| t.parse::<i64>().ok()),
        header("webhook-signature").unwrap_or_default(),
    );
    let secret = state.secret.locked().clone();
    let verified = match (&id, timestamp, secret) {
        (Some(id), Some(timestamp), Some(secret)) => {
            let expected = secret.sign(id, timestamp, &body);
            signatures.split(' ').any(|given| given == expected)
        }
        _ => false,
    };
    let is_ready = serde_json::from_slice::<serde_json::Value>(&body)
        .is_ok_and(|event| event["type"] == "video.ready");
    let mut arrivals = state.arrivals.locked();
    match id {
        Some(id) if verified => {
            if is_ready && arrivals.ready.insert(id.clone()) {
                state.ready.fetch_add(1, Ordering::Relaxed);
            }
            *arrivals.verified.entry(id).or_default() += 1;
        }
        _ => arrivals.bad += 1,
    }
    HttpResponse::NoContent().finish()
}
