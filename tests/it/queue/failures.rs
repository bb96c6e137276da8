//! Failed attempts: retries up to the attempt budget (I6), permanent errors, and jobs that
//! die in their last attempt becoming DEAD with their video failed.

use std::time::Duration;

use diesel_async::RunQueryDsl;
use vidq::domain::media::MediaError;

use crate::support::app::TestApp;
use crate::support::queue::{Worker, claim, expire_lease, fast_settings, video_id};
use crate::support::scripted::{Scripted, Step};
use crate::support::wait::wait_for_count;

#[tokio::test]
async fn three_retryable_failures_fail_the_video_with_one_event() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let body = Scripted::new(Step::Fail(MediaError::retryable(
        vidq::domain::failure::FailureCode::StorageError,
        "S3 said 503",
    )));
    let worker = Worker::start(&app.db.url, body.clone(), fast_settings("node")).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM videos WHERE status = 'failed'",
        1,
        Duration::from_secs(20),
    )
    .await;
    worker.stop().await;
    assert_eq!(
        body.started
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.1)
            .collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let id = video_id(&video);
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}' AND error_code = 'storage_error'"
        ))
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
    assert_eq!(app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED' AND attempt_count = 3").await, 1);
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'retry'")
            .await,
        2
    );
    assert_eq!(app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'failed' AND error_code = 'storage_error'").await, 1);
    // No code path can make a fourth attempt: the schema refuses it too.
    let mut conn = app.pool.get().await.unwrap();
    let fourth =
        diesel::sql_query("UPDATE video_encoding_jobs SET attempt_count = attempt_count + 1")
            .execute(&mut conn)
            .await;
    assert!(fourth.is_err(), "CHECK (attempt_count BETWEEN 0 AND 3)");
    let api = app.video(&key, &id).await;
    assert_eq!(api["error"]["code"], "storage_error");
    assert_eq!(api["attempts"], 3);
}

#[tokio::test]
async fn a_permanent_error_fails_the_video_on_the_first_attempt() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    let body = Scripted::new(Step::Fail(MediaError::permanent(
        vidq::domain::failure::FailureCode::InvalidMedia,
        "not a video",
    )));
    let worker = Worker::start(&app.db.url, body.clone(), fast_settings("node")).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM videos WHERE status = 'failed' AND error_code = 'invalid_media'",
        1,
        Duration::from_secs(10),
    )
    .await;
    worker.stop().await;
    assert_eq!(
        body.started.lock().unwrap().len(),
        1,
        "no retry burns CPU on it"
    );
    assert_eq!(app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED' AND attempt_count = 1").await, 1);
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.failed'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn a_job_that_dies_in_its_last_attempt_becomes_dead_and_its_video_failed() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    for attempt in 1..=3 {
        let claimed = claim(&app, "doomed", 30.0).await.unwrap();
        assert_eq!(claimed.attempt, attempt);
        expire_lease(&app, &claimed).await; // the node "dies": no heartbeat
    }
    assert!(
        claim(&app, "next", 30.0).await.is_none(),
        "no fourth attempt is claimable"
    );
    assert_eq!(vidq::queue::reaper::reap_dead(&app.pool).await.unwrap(), 1);
    assert_eq!(
        vidq::queue::reaper::reap_dead(&app.pool).await.unwrap(),
        0,
        "reaping twice closes it once"
    );
    let id = video_id(&video);
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'DEAD' AND completed_at IS NOT NULL AND attempt_count = 3").await,
        1
    );
    assert_eq!(app.count(&format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'failed' AND error_code = 'attempts_exhausted'")).await, 1);
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.failed'"
        )
        .await,
        1
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'dead'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'lost'")
            .await,
        2
    );
}

#[tokio::test]
async fn a_worker_reaps_dead_jobs_on_its_tick() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    for _ in 1..=3 {
        let claimed = claim(&app, "doomed", 30.0).await.unwrap();
        expire_lease(&app, &claimed).await;
    }
    let worker = Worker::start(
        &app.db.url,
        Scripted::new(Step::Block),
        fast_settings("reaper"),
    )
    .await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'DEAD'",
        1,
        Duration::from_secs(5),
    )
    .await;
    worker.stop().await;
}
