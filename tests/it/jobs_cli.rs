//! `vidq jobs`: operators inspect the queue and retry or cancel through the fenced paths.

use std::time::Duration;

use crate::support::app::TestApp;
use crate::support::cli::{stderr, vidq};
use crate::support::queue::{Worker, claim, expire_lease, fast_settings};
use crate::support::scripted::{Scripted, Step};
use crate::support::wait::wait_for_count;

async fn job_id(app: &TestApp) -> i64 {
    app.count("SELECT max(id) AS n FROM video_encoding_jobs")
        .await
}

#[tokio::test]
async fn an_operator_lists_shows_and_retries_a_dead_job() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    for _ in 0..3 {
        let claimed = claim(&app, "doomed", 30.0).await.unwrap();
        expire_lease(&app, &claimed).await;
    }
    vidq::queue::reaper::reap_dead(&app.pool).await.unwrap();
    let id = job_id(&app).await;
    let env = [("DATABASE_URL", app.db.url.as_str())];

    let list = vidq(&["jobs", "list", "--status", "DEAD"], &env).await;
    assert!(list.status.success(), "{}", stderr(&list));
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with(&id.to_string()) && l.contains("DEAD")),
        "{text}"
    );

    let show = vidq(&["jobs", "show", &id.to_string()], &env).await;
    let json: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(json["job"]["status"], "DEAD");
    assert_eq!(json["attempts"].as_array().unwrap().len(), 3);

    let retry = vidq(&["jobs", "retry", &id.to_string()], &env).await;
    assert!(retry.status.success(), "{}", stderr(&retry));
    assert_eq!(app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PENDING' AND attempt_count = 0").await, 1);
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM videos WHERE status = 'queued' AND error_code IS NULL"
        )
        .await,
        1
    );

    let again = vidq(&["jobs", "retry", &id.to_string()], &env).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("can be retried"),
        "{}",
        stderr(&again)
    );

    let worker = Worker::start(
        &app.db.url,
        Scripted::new(Step::Succeed(Duration::ZERO)),
        fast_settings("n"),
    )
    .await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        1,
        Duration::from_secs(5),
    )
    .await;
    worker.stop().await;
}

#[tokio::test]
async fn cancelling_a_running_job_fails_its_video_and_stops_the_worker_at_its_next_heartbeat() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    let worker = Worker::start(
        &app.db.url,
        Scripted::new(Step::Block),
        fast_settings("busy"),
    )
    .await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PROCESSING'",
        1,
        Duration::from_secs(5),
    )
    .await;
    let id = job_id(&app).await;

    let cancel = vidq(
        &["jobs", "cancel", &id.to_string()],
        &[("DATABASE_URL", app.db.url.as_str())],
    )
    .await;
    assert!(cancel.status.success(), "{}", stderr(&cancel));
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM videos WHERE status = 'failed' AND error_code = 'cancelled'"
        )
        .await,
        1
    );
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.failed'"
        )
        .await,
        1
    );
    // The blocked attempt notices at its next heartbeat, stops, and writes nothing more.
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM job_attempts WHERE outcome = 'lost' AND error_code = 'cancelled' AND ended_at IS NOT NULL",
        1,
        Duration::from_secs(5),
    )
    .await;
    worker.stop().await;
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM notification_outbox WHERE event_type <> 'video.accepted'"
        )
        .await,
        1
    );
    assert_eq!(app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED' AND claim_token IS NULL").await, 1);
}
