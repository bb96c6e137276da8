//! An attempt's life on a worker: handed back with its attempt restored on shutdown, kept
//! past its lease by the heartbeat, and its finalize waited for by a worker that stops.

use std::time::Duration;

use crate::support::app::TestApp;
use crate::support::db::UsersHeld;
use crate::support::queue::{Worker, fast_settings, video_id};
use crate::support::scripted::{Scripted, Step};
use crate::support::wait::{wait_for_count, wait_for_lock_waits};

#[tokio::test]
async fn on_shutdown_a_worker_hands_its_claim_back_with_the_attempt_restored() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let id = video_id(&video);
    let blocked = Scripted::new(Step::Block);
    let first = Worker::start(&app.db.url, blocked.clone(), fast_settings("first")).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PROCESSING'",
        1,
        Duration::from_secs(5),
    )
    .await;
    let running = app.video(&key, &id).await;
    assert_eq!(
        (running["status"].as_str(), running["attempts"].as_i64()),
        (Some("processing"), Some(1))
    );
    let listed = |status: &'static str| {
        let (app, key) = (&app, &key);
        async move {
            let page: serde_json::Value = app
                .get(key, &format!("/v1/videos?status={status}"))
                .await
                .json()
                .await
                .unwrap();
            page["videos"].as_array().unwrap().len()
        }
    };
    assert_eq!(
        (listed("processing").await, listed("queued").await),
        (1, 0),
        "the filter follows the derived status"
    );

    first.stop().await;
    assert_eq!(app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PENDING' AND attempt_count = 0").await, 1);
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'queued'"
        ))
        .await,
        1
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'released'")
            .await,
        1
    );

    let finisher = Scripted::new(Step::Succeed(Duration::from_millis(10)));
    let second = Worker::start(&app.db.url, finisher.clone(), fast_settings("second")).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED'",
        1,
        Duration::from_secs(5),
    )
    .await;
    second.stop().await;
    assert_eq!(
        *finisher.started.lock().unwrap(),
        vec![(id, 1)],
        "the next node starts with the same attempt number"
    );
}

#[tokio::test]
async fn the_heartbeat_keeps_a_long_attempt_past_its_lease() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    let body = Scripted::new(Step::Succeed(Duration::from_millis(2500)));
    let mut settings = fast_settings("a");
    settings.lease = Duration::from_secs(1);
    settings.heartbeat = Some(Duration::from_millis(250));
    let a = Worker::start(&app.db.url, body.clone(), settings.clone()).await;
    settings.node_id = "b".into();
    let b = Worker::start(&app.db.url, body.clone(), settings).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED'",
        1,
        Duration::from_secs(10),
    )
    .await;
    a.stop().await;
    b.stop().await;
    assert_eq!(
        body.started.lock().unwrap().len(),
        1,
        "never reclaimed while its heartbeat ran"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE attempt_count = 1")
            .await,
        1
    );
}

/// A slot claims its next job ahead of its finalize and goes on while the finalize commits;
/// a worker stopped then hands the running job back and still waits for the finalize. Here
/// another transaction holds the uploader's row, so the first job's finalize cannot commit:
/// the slot takes the second job all the same, the stop hands that one back, and the worker
/// does not return until the row is let go and the first job is COMPLETED.
#[tokio::test]
async fn a_worker_stopped_while_a_finalize_commits_waits_for_it() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    for _ in 0..2 {
        app.uploaded_video(&key).await;
    }
    let held = UsersHeld::hold(&app.db.url).await;
    let body = Scripted::new(Step::Succeed(Duration::from_millis(200)));
    let worker = Worker::start(&app.db.url, body.clone(), fast_settings("ahead")).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PROCESSING'",
        2,
        Duration::from_secs(10),
    )
    .await;
    worker.stop.cancel();
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM job_attempts WHERE outcome = 'released'",
        1,
        Duration::from_secs(10),
    )
    .await;
    // The first job's finalize is blocked behind the held row...
    wait_for_lock_waits(&app, 1).await;
    // ...and a worker that did not wait for it would have returned right after handing the
    // second job back. Nothing marks the moment it would have, so it is given a fixed while.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !worker.handle.is_finished(),
        "the stopped worker waits for the finalize it started"
    );
    held.let_go().await;
    tokio::time::timeout(Duration::from_secs(40), worker.handle)
        .await
        .expect("the worker stops once its finalize has committed")
        .unwrap();
    for (status, jobs) in [("COMPLETED", 1), ("PENDING", 1)] {
        assert_eq!(
            app.count(&format!(
                "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = '{status}'"
            ))
            .await,
            jobs,
            "{status}: the first job finalized, the second handed back"
        );
    }
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        1
    );
}
