//! The queue's guarantees with in-process workers and scripted job bodies: each job finishes
//! once (I2, I4), a NOTIFY wakes an idle worker, and the claim's plan. Fencing (I3),
//! failures (I6, dead jobs) and an attempt's life (release, heartbeat) are in the
//! submodules; the helpers they share are in `support::queue`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use vidq::queue::runner::ClaimObserver;

use crate::support::app::TestApp;
use crate::support::queue::{Worker, each_job_ran_once_and_announced_once, fast_settings};
use crate::support::scripted::{Scripted, Step};
use crate::support::wait::wait_for_count;

mod attempt_log;
mod batch;
mod claim_stop;
mod failures;
mod fencing;
mod lifecycle;

#[tokio::test]
async fn many_workers_finish_every_job_exactly_once() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let mut videos = Vec::new();
    for _ in 0..24 {
        videos.push(app.uploaded_video(&key).await);
    }
    let body = Scripted::new(Step::Succeed(Duration::from_millis(15)));
    let mut workers = Vec::new();
    for n in 0..4 {
        workers.push(
            Worker::start(
                &app.db.url,
                body.clone(),
                fast_settings(&format!("node-{n}")),
            )
            .await,
        );
    }
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED'",
        24,
        Duration::from_secs(30),
    )
    .await;
    for worker in workers {
        worker.stop().await;
    }
    each_job_ran_once_and_announced_once(&app, &body, 24).await;
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'completed'")
            .await,
        24
    );
    assert!(
        app.count("SELECT count(DISTINCT claimed_by) AS n FROM video_encoding_jobs")
            .await
            > 1,
        "the work spread across nodes"
    );
    let ready: serde_json::Value = app
        .get(
            &key,
            &format!("/v1/videos/{}", videos[0]["id"].as_str().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["attempts"].as_i64()),
        (Some("ready"), Some(1))
    );
}

#[tokio::test]
async fn a_worker_wakes_on_notify_long_before_its_poll() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let body = Scripted::new(Step::Succeed(Duration::ZERO));
    let mut settings = fast_settings("sleepy");
    settings.poll = Duration::from_secs(30);
    let found_nothing = Arc::new(AtomicUsize::new(0));
    let observer: ClaimObserver = {
        let found_nothing = found_nothing.clone();
        Arc::new(move |claimed| {
            if claimed.is_none() {
                found_nothing.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let worker = Worker::observed(&app.db.url, body, settings, Some(observer)).await;
    // Idle and listening: its first claim found nothing, and so did the catch-up claim the
    // idle line asks for once it LISTENs. From here only a notification (or the poll, 30 s
    // away) can make it claim.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // (`AtomicUsize::load` by path: diesel's `RunQueryDsl::load` is in scope.)
    while AtomicUsize::load(&found_nothing, Ordering::SeqCst) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker never became idle"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    app.uploaded_video(&key).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED'",
        1,
        Duration::from_secs(3),
    )
    .await;
    worker.stop().await;
}

#[derive(QueryableByName)]
struct PlanLine {
    #[diesel(sql_type = diesel::sql_types::Text, column_name = "QUERY PLAN")]
    line: String,
}

#[tokio::test]
async fn the_claim_is_an_index_scan_with_no_sort_even_with_a_large_backlog() {
    let app = TestApp::spawn().await;
    let (owner, _) = vidq::app::users::create_user(&app.pool, "bulk")
        .await
        .unwrap();
    let mut conn = app.pool.get().await.unwrap();
    vidq::db::synthetic::backlog(&mut conn, owner, 20_000)
        .await
        .unwrap();
    let plan: Vec<PlanLine> = diesel::sql_query(format!("EXPLAIN {}", vidq::db::jobs::CLAIM_SQL))
        .bind::<diesel::sql_types::Uuid, _>(uuid::Uuid::now_v7())
        .bind::<diesel::sql_types::Text, _>("explain")
        .bind::<diesel::sql_types::Double, _>(60.0)
        .load(&mut conn)
        .await
        .unwrap();
    let plan: Vec<String> = plan.into_iter().map(|l| l.line).collect();
    let text = plan.join("\n");
    assert!(
        text.contains("Index Scan using video_encoding_jobs_claimable_idx"),
        "{text}"
    );
    assert!(!text.contains("Sort"), "no Sort node:\n{text}");
    assert!(!text.contains("Seq Scan on video_encoding_jobs"), "{text}");
}

#[derive(QueryableByName)]
struct BacklogShape {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    per_owner_min: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    per_owner_max: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    owners: i64,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    ids_in_queue_order: bool,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    all_version_7: bool,
}

/// The benchmarks' backlog looks like the API's: its ids are v7 and sort in the order the
/// jobs are claimed (random ids would scatter every index insert), and its videos are dealt
/// to the owners in turn.
#[tokio::test]
async fn the_synthetic_backlog_has_time_ordered_ids_and_deals_videos_to_each_owner() {
    let app = TestApp::spawn().await;
    let mut owners = Vec::new();
    for name in ["one", "two", "three"] {
        let (owner, _) = vidq::app::users::create_user(&app.pool, name)
            .await
            .unwrap();
        owners.push(owner);
    }
    let mut conn = app.pool.get().await.unwrap();
    vidq::db::synthetic::backlog_of_owners(&mut conn, &owners, 3_001)
        .await
        .unwrap();
    let shape: BacklogShape = diesel::sql_query(
        "WITH per_owner AS (SELECT owner_id, count(*) AS n FROM videos GROUP BY owner_id),
              ordered AS (
                SELECT v.id, u.id AS upload_id,
                       lag(v.id) OVER (ORDER BY j.available_at) AS previous_video,
                       lag(u.id) OVER (ORDER BY j.available_at) AS previous_upload
                  FROM video_encoding_jobs j JOIN videos v ON v.id = j.video_id
                  JOIN uploads u ON u.id = v.upload_id)
         SELECT (SELECT min(n) FROM per_owner) AS per_owner_min,
                (SELECT max(n) FROM per_owner) AS per_owner_max,
                (SELECT count(*) FROM per_owner) AS owners,
                (SELECT bool_and(previous_video < id AND previous_upload < upload_id)
                   FROM ordered WHERE previous_video IS NOT NULL) AS ids_in_queue_order,
                (SELECT bool_and(substr(id::text, 15, 1) = '7' AND substr(id::text, 20, 1) = '8')
                   FROM videos) AS all_version_7",
    )
    .get_result(&mut conn)
    .await
    .unwrap();
    assert_eq!(shape.owners, 3);
    assert_eq!((shape.per_owner_min, shape.per_owner_max), (1_000, 1_001));
    assert!(shape.ids_in_queue_order, "ids sort as the jobs are queued");
    assert!(shape.all_version_7, "every id is a v7 with the RFC variant");
}
