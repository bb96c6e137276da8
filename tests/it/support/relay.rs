//! The relay in this process with test settings, webhook endpoints registered through the
//! API, and events committed as producers commit them.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use vidq::domain::event::Event;
use vidq::domain::ids::{UploadId, UserId, VideoId};
use vidq::roles::relay::RelayArgs;

use crate::support::app::TestApp;

/// A relay tuned for tests: fast polls, short leases, a quick retry schedule.
pub fn relay_args(schedule: &str) -> RelayArgs {
    RelayArgs {
        relay_id: None,
        relay_poll_ms: 50,
        relay_lease_secs: 2,
        concurrency: 16,
        batch: 64,
        webhook_timeout_ms: 1000,
        schedule: schedule.parse().unwrap(),
        retention_hours: 168,
        nats_url: None,
        nats_subject_prefix: "vidq".into(),
        nats_stream: "VIDQ".into(),
        webhooks: vidq::config::WebhookArgs {
            allow_private: true,
        },
    }
}

/// A relay running in this process.
pub struct RelayRun {
    stop: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
}

impl RelayRun {
    pub async fn start(app: &TestApp, args: &RelayArgs) -> Self {
        let relay = vidq::roles::relay::build(&app.db.url, args).await.unwrap();
        let stop = CancellationToken::new();
        let handle = tokio::spawn(Arc::new(relay).run(stop.clone()));
        Self { stop, handle }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.handle)
            .await
            .unwrap()
            .unwrap();
    }
}

/// Registers `url` for the user behind `key`; returns the endpoint JSON (with its secret).
pub async fn register(app: &TestApp, key: &str, url: &str) -> Value {
    register_body(app, key, &json!({ "url": url })).await
}

/// Registers an endpoint that receives only `event_types`.
pub async fn register_for(app: &TestApp, key: &str, url: &str, event_types: &[&str]) -> Value {
    register_body(app, key, &json!({ "url": url, "event_types": event_types })).await
}

async fn register_body(app: &TestApp, key: &str, body: &Value) -> Value {
    let response = app.post(key, "/v1/webhooks", body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json().await.unwrap()
}

pub async fn user_id(app: &TestApp, name: &str) -> UserId {
    use vidq::db::schema::users;
    let mut conn = app.pool.get().await.unwrap();
    users::table
        .filter(users::name.eq(name))
        .select(users::id)
        .first(&mut conn)
        .await
        .unwrap()
}

/// Commits `n` events for `owner`, each in its own transaction, as producers do.
pub async fn produce(app: &TestApp, owner: UserId, n: usize) -> Vec<String> {
    let conn = app.pool.get().await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..n {
        let event = Event::video_accepted(VideoId::new(), UploadId::new(), Utc::now());
        vidq::db::deliveries::outbox::insert(&conn, owner, &event)
            .await
            .unwrap();
        ids.push(event.id.to_string());
    }
    ids
}

/// The endpoint's delivery log (`GET /v1/webhooks/{id}/deliveries`).
pub async fn deliveries(app: &TestApp, key: &str, endpoint: &Value) -> Value {
    let id = endpoint["id"].as_str().unwrap();
    let response = app
        .get(key, &format!("/v1/webhooks/{id}/deliveries?limit=100"))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}
