//! The queue's guarantees with in-process workers and scripted job bodies: each job finishes
//! once (I2, I4), late results change nothing (I3), retries and the attempt budget (I6),
//! dead jobs, graceful release, and the claim's plan.

use std::sync::Arc;
use std::time::Duration;

use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use tokio_util::sync::CancellationToken;
use vidq::app::jobs::{self, Claim, JobError};
use vidq::domain::ids::VideoId;
use vidq::domain::media::MediaError;
use vidq::queue::JobBody;
use vidq::queue::runner::{ClaimObserver, Runner, WorkerSettings};

use crate::harness::TestApp;
use crate::scripted::{Scripted, Step, output};

pub fn fast_settings(node: &str) -> WorkerSettings {
    WorkerSettings {
        node_id: node.to_owned(),
        slots: 1,
        poll: Duration::from_millis(50),
        lease: Duration::from_secs(2),
        heartbeat: Some(Duration::from_millis(400)),
        deadline: Duration::from_secs(60),
        retry_delay: Duration::from_millis(50),
        listeners: vidq::queue::line::Listeners::HeadOfLine,
    }
}

pub struct Worker {
    pub stop: CancellationToken,
    pub handle: tokio::task::JoinHandle<()>,
}

impl Worker {
    pub async fn start<B: JobBody>(url: &str, body: Arc<B>, settings: WorkerSettings) -> Self {
        Self::observed(url, body, settings, None).await
    }

    /// Like [`Worker::start`], calling `on_claim` after every claim statement.
    pub async fn observed<B: JobBody>(
        url: &str,
        body: Arc<B>,
        settings: WorkerSettings,
        on_claim: Option<ClaimObserver>,
    ) -> Self {
        let pool = vidq::db::connect(url, 2).await.unwrap();
        let runner = Arc::new(Runner {
            pool,
            database_url: url.to_owned(),
            body,
            settings,
            on_claim,
            health: Default::default(),
        });
        let stop = CancellationToken::new();
        let handle = tokio::spawn(runner.run(stop.clone()));
        Self { stop, handle }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(40), self.handle)
            .await
            .unwrap()
            .unwrap();
    }
}

/// Polls `sql` (a `count(*) AS n` query) until it returns `want`.
pub async fn wait_for_count(app: &TestApp, sql: &str, want: i64, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let n = app.count(sql).await;
        if n == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {sql} = {want} (last {n})"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub fn video_id(video: &serde_json::Value) -> VideoId {
    video["id"].as_str().unwrap().parse().unwrap()
}

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
    assert_eq!(
        *body.max_overlap.lock().unwrap(),
        1,
        "no two live claims of one job overlap (I2)"
    );
    assert_eq!(body.started.lock().unwrap().len(), 24, "each job ran once");
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE attempt_count <> 1")
            .await,
        0
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM videos WHERE status = 'ready'")
            .await,
        24
    );
    // I4: exactly one terminal event per video.
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM (SELECT video_id FROM notification_outbox
               WHERE event_type IN ('video.ready', 'video.failed') GROUP BY video_id HAVING count(*) = 1) once"
        )
        .await,
        24
    );
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM notification_outbox WHERE event_type <> 'video.accepted'"
        )
        .await,
        24
    );
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

pub async fn claim(app: &TestApp, node: &str, lease_secs: f64) -> Option<Claim> {
    let mut conn = app.pool.get().await.unwrap();
    vidq::db::jobs::claim(&mut conn, node, lease_secs)
        .await
        .unwrap()
        .map(Claim::from)
}

#[tokio::test]
async fn a_late_result_after_the_lease_expired_and_another_node_reclaimed_changes_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let zombie = claim(&app, "zombie", 0.3).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let winner = claim(&app, "winner", 30.0).await.unwrap();
    assert_eq!(
        (zombie.job_id, zombie.attempt, winner.attempt),
        (winner.job_id, 1, 2)
    );

    let before = app
        .count("SELECT count(*) AS n FROM notification_outbox")
        .await;
    let late = jobs::finalize_ready(
        &app.pool,
        &zombie,
        &output(&vidq::pipeline::AttemptPlan {
            video: zombie.video,
            run: zombie.run,
            attempt: zombie.attempt,
            original_key: zombie.original_key.clone(),
        }),
    )
    .await;
    assert!(matches!(late, Err(JobError::ClaimLost)), "{late:?}");
    let failed = jobs::finalize_failed(
        &app.pool,
        &zombie,
        &MediaError::permanent("invalid_media", "late"),
    )
    .await;
    assert!(matches!(failed, Err(JobError::ClaimLost)));
    let retried = jobs::fail_or_retry(
        &app.pool,
        &zombie,
        &MediaError::retryable("x", "late"),
        Duration::ZERO,
    )
    .await;
    assert!(matches!(retried, Err(JobError::ClaimLost)));
    assert!(matches!(
        jobs::release(&app.pool, &zombie).await,
        Err(JobError::ClaimLost)
    ));

    // I3: the video, the outbox and the job are exactly as the winner's claim left them.
    let id = video_id(&video);
    assert_eq!(app.count(&format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'queued' AND hls_key IS NULL")).await, 1);
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox")
            .await,
        before
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PROCESSING' AND claim_token = '{}' AND attempt_count = 2",
            winner.token
        ))
        .await,
        1
    );
    // The winner's result does land.
    let plan = vidq::pipeline::AttemptPlan {
        video: winner.video,
        run: winner.run,
        attempt: 2,
        original_key: winner.original_key.clone(),
    };
    jobs::finalize_ready(&app.pool, &winner, &output(&plan))
        .await
        .unwrap();
    assert_eq!(app.count(&format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready' AND live_attempt = 2")).await, 1);
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'lost' AND attempt = 1")
            .await,
        1
    );
}

#[tokio::test]
async fn three_retryable_failures_fail_the_video_with_one_event() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let body = Scripted::new(Step::Fail(MediaError::retryable(
        "storage_error",
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
        "invalid_media",
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
        let claimed = claim(&app, "doomed", 0.1).await.unwrap();
        assert_eq!(claimed.attempt, attempt);
        tokio::time::sleep(Duration::from_millis(150)).await; // the node "dies": no heartbeat
    }
    assert!(
        claim(&app, "next", 30.0).await.is_none(),
        "no fourth attempt is claimable"
    );
    assert_eq!(jobs::reap_dead(&app.pool).await.unwrap(), 1);
    assert_eq!(
        jobs::reap_dead(&app.pool).await.unwrap(),
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
        claim(&app, "doomed", 0.05).await.unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
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

#[tokio::test]
async fn a_worker_wakes_on_notify_long_before_its_poll() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let body = Scripted::new(Step::Succeed(Duration::ZERO));
    let mut settings = fast_settings("sleepy");
    settings.poll = Duration::from_secs(30);
    let worker = Worker::start(&app.db.url, body, settings).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // idle, waiting
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

#[tokio::test]
async fn deleting_the_uploader_while_their_videos_finalize_neither_deadlocks_nor_orphans() {
    let app = TestApp::spawn().await;
    for round in 0..5 {
        let name = format!("user{round}");
        let key = app.create_user(&name).await;
        for _ in 0..3 {
            app.uploaded_video(&key).await;
        }
        let mut claims = Vec::new();
        while let Some(c) = claim(&app, "node", 30.0).await {
            claims.push(c);
        }
        let finalizes = futures_util::future::join_all(claims.iter().map(|c| async {
            let plan = vidq::pipeline::AttemptPlan {
                video: c.video,
                run: c.run,
                attempt: c.attempt,
                original_key: c.original_key.clone(),
            };
            jobs::finalize_ready(&app.pool, c, &output(&plan)).await
        }));
        let (finalized, deleted) =
            tokio::join!(finalizes, vidq::app::users::delete_user(&app.ctx, &name));
        deleted.expect("the deletion completes");
        for result in finalized {
            assert!(
                matches!(result, Ok(()) | Err(JobError::ClaimLost)),
                "no deadlock or other error: {result:?}"
            );
        }
        for table in [
            "uploads",
            "videos",
            "video_encoding_jobs",
            "job_attempts",
            "notification_outbox",
        ] {
            assert_eq!(
                app.count(&format!("SELECT count(*) AS n FROM {table}"))
                    .await,
                0,
                "round {round}: {table}"
            );
        }
    }
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
    vidq::db::synthetic::backlog(&mut conn, owner.0, 20_000)
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
