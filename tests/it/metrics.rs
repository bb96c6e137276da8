//! `/metrics` of the API and of the relay: Prometheus text with the families operators
//! alert on, values that follow what happened (the worker's and the sweeper's listeners are
//! scraped in `worker_process` and `recovery`).

use std::time::Duration;

use crate::support::app::TestApp;
use crate::support::metrics::{sample, scrape};
use crate::support::process::{free_port, vidq_child};
use crate::support::worker::probe_until;

#[tokio::test]
async fn the_api_counts_requests_by_route_and_reads_the_queue_outbox_and_sweepers_at_scrape_time() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let id = video["id"].as_str().unwrap();
    // The request counters are the process's; other tests in this binary add to them too,
    // so this test counts what its own requests added.
    let ok =
        "vidq_http_requests_total{method=\"GET\",route=\"/v1/videos/{video_id}\",status=\"200\"}";
    let missing =
        "vidq_http_requests_total{method=\"GET\",route=\"/v1/videos/{video_id}\",status=\"404\"}";
    let other = "vidq_http_requests_total{method=\"OTHER\",route=\"unmatched\",status=\"404\"}";
    let before = scrape(&app).await;
    app.get(&key, &format!("/v1/videos/{id}")).await;
    app.get(&key, "/v1/videos/not-a-video").await;
    let made_up = reqwest::Method::from_bytes(b"FOO123").unwrap();
    app.http
        .request(made_up, app.url("/nowhere"))
        .send()
        .await
        .unwrap();
    let text = scrape(&app).await;
    let added = |series: &str| {
        sample(&text, series).unwrap_or(0.0) - sample(&before, series).unwrap_or(0.0)
    };
    // Labelled by the route's pattern, never by the id in the path; made-up methods share one label.
    assert!(added(ok) >= 1.0, "{text}");
    assert!(added(missing) >= 1.0, "{text}");
    assert!(added(other) >= 1.0, "{text}");
    assert!(!text.contains(id), "no video id in any label");
    assert!(!text.contains("FOO123"));
    assert!(
        text.contains("# TYPE vidq_http_request_duration_seconds histogram"),
        "{text}"
    );
    assert_eq!(sample(&text, "vidq_database_up"), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, "vidq_queue_jobs{status=\"PENDING\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "vidq_queue_jobs{status=\"DEAD\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "vidq_queue_completed_last_hour"),
        Some(0.0),
        "{text}"
    );
    assert!(sample(&text, "vidq_queue_oldest_pending_seconds").unwrap() >= 0.0);
    // The confirm wrote `video.accepted`; no relay runs, so it waits unrouted.
    assert!(
        sample(&text, "vidq_outbox_backlog").unwrap() >= 1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "vidq_sweep_backlog{axis=\"upload\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "vidq_live_recordings_open"),
        Some(0.0),
        "{text}"
    );
}

#[tokio::test]
async fn the_relays_listener_reports_its_backlog_and_deliveries() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    // A receiver that is down: the delivery fails and waits for its next try.
    let closed = format!("http://127.0.0.1:{}/hooks", free_port());
    crate::support::relay::register(&app, &key, &closed).await;
    app.uploaded_video(&key).await;
    let logs = tempfile::tempdir().unwrap();
    let port = free_port();
    let _relay = vidq_child("relay", &logs.path().join("relay.log"))
        .env("DATABASE_URL", &app.db.url)
        .env("VIDQ_RELAY_POLL_MS", "100")
        .env("VIDQ_WEBHOOK_ALLOW_PRIVATE", "true")
        .env("VIDQ_WEBHOOK_RETRY_SCHEDULE", "0s,1h")
        .env("VIDQ_HEALTH_LISTEN", format!("127.0.0.1:{port}"))
        .spawn()
        .unwrap();
    let health = probe_until(port, "/healthz", 200, Duration::from_secs(15)).await;
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["status"], "ok");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = probe_until(port, "/metrics", 200, Duration::from_secs(5)).await;
        let retried = sample(
            &text,
            "vidq_relay_deliveries_total{outcome=\"retry\",sink=\"webhook\"}",
        );
        if retried == Some(1.0) && sample(&text, "vidq_outbox_backlog") == Some(1.0) {
            assert!(
                sample(&text, "vidq_outbox_oldest_pending_seconds").unwrap() > 0.0,
                "{text}"
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never saw the failed try and the waiting delivery:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        app.count("SELECT count(*) AS n FROM nodes WHERE role = 'relay'")
            .await,
        1,
        "the relay reported itself for the dashboard"
    );
}
