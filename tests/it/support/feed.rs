//! The owner's event feed read through the API.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::app::TestApp;

/// The owner's feed (`GET /v1/events`) once it shows at least `want` events.
pub async fn feed(app: &TestApp, key: &str, want: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = app.get(key, "/v1/events?limit=100").await;
        assert!(response.status().is_success());
        let body: Value = response.json().await.unwrap();
        let events = body["events"].as_array().unwrap().clone();
        if events.len() >= want {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "the feed shows {} events, want {want}",
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
