//! The idle line: idle workers take turns listening, so a new job costs one claim, not one
//! per idle worker; bursts still spread over every worker without waiting for a poll; a
//! head that vanishes is replaced by the next in line; a head whose claim fails tries again
//! at once instead of sleeping until its poll.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use diesel_async::AsyncConnection;
use vidq::queue::line::{IDLE_LINE_LOCK, Listeners};
use vidq::queue::runner::ClaimObserver;

use crate::support::app::TestApp;
use crate::support::queue::{Worker, fast_settings};
use crate::support::scripted::{Scripted, Step};
use crate::support::wait::wait_for_count;

const COMPLETED: &str = "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED'";

/// Rows of `pg_locks` for the line's lock in this test's database, `granted` or waiting.
fn line_lock_sql(select: &str, granted: bool) -> String {
    format!(
        "SELECT {select} AS n FROM pg_locks WHERE locktype = 'advisory'
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND classid::bigint = ({IDLE_LINE_LOCK}::bigint >> 32)
           AND objid::bigint = ({IDLE_LINE_LOCK}::bigint & 4294967295)
           AND objsubid = 1 AND granted = {granted}"
    )
}

/// Workers that never poll within a test: anything they pick up came through NOTIFY.
async fn start_workers(
    app: &TestApp,
    count: usize,
    listeners: Listeners,
    step: Step,
    claims: &Arc<AtomicUsize>,
) -> Vec<Worker> {
    let body = Scripted::new(step);
    let observer: ClaimObserver = {
        let claims = claims.clone();
        Arc::new(move |_| {
            claims.fetch_add(1, Ordering::SeqCst);
        })
    };
    let mut workers = Vec::new();
    for n in 0..count {
        let mut settings = fast_settings(&format!("node-{n}"));
        settings.poll = Duration::from_secs(60);
        settings.listeners = listeners;
        workers.push(
            Worker::observed(&app.db.url, body.clone(), settings, Some(observer.clone())).await,
        );
    }
    workers
}

/// Waits until `waiting` workers are queued behind the head of the line.
async fn wait_in_line(app: &TestApp, waiting: i64) {
    wait_for_count(
        app,
        &line_lock_sql("count(*)", false),
        waiting,
        Duration::from_secs(10),
    )
    .await;
}

/// Waits until all `count` workers are idle (queued behind the head, or listening) and no
/// claim has run for a moment.
async fn settle(app: &TestApp, listeners: Listeners, count: usize, claims: &AtomicUsize) {
    let count = i64::try_from(count).unwrap();
    match listeners {
        Listeners::HeadOfLine => {
            wait_in_line(app, count - 1).await;
        }
        Listeners::EveryIdle => {
            let listening = "SELECT count(*) AS n FROM pg_stat_activity
                WHERE datname = current_database() AND query = 'LISTEN vidq_jobs'";
            wait_for_count(app, listening, count, Duration::from_secs(10)).await;
        }
    }
    // Quiet means no claim for 100 ms: the spell is the condition waited for.
    loop {
        let seen = claims.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        if claims.load(Ordering::SeqCst) == seen {
            return;
        }
    }
}

/// Claim statements run per job for jobs that arrive one at a time at `count` idle workers.
async fn claims_per_job(listeners: Listeners, count: usize) -> f64 {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let claims = Arc::new(AtomicUsize::new(0));
    let workers = start_workers(
        &app,
        count,
        listeners,
        Step::Succeed(Duration::ZERO),
        &claims,
    )
    .await;
    settle(&app, listeners, count, &claims).await;
    let before = claims.load(Ordering::SeqCst);
    const JOBS: i64 = 10;
    for done in 1..=JOBS {
        app.uploaded_video(&key).await;
        wait_for_count(&app, COMPLETED, done, Duration::from_secs(5)).await;
        settle(&app, listeners, count, &claims).await; // the finisher back in line
    }
    let spent = claims.load(Ordering::SeqCst) - before;
    for worker in workers {
        worker.stop().await;
    }
    spent as f64 / JOBS as f64
}

#[tokio::test]
async fn a_new_job_costs_one_claim_not_one_per_idle_worker() {
    let line = claims_per_job(Listeners::HeadOfLine, 6).await;
    let everyone = claims_per_job(Listeners::EveryIdle, 6).await;
    // Head of the line: its claim, the next head's catch-up claim, the finisher's look for
    // more: 3. Every idle worker listening: 6 racing claims, the finisher's look for more
    // and its catch-up once it listens again: 8.
    assert!(line <= 3.5, "{line} claims per job with the idle line");
    assert!(
        everyone >= 6.0,
        "{everyone} claims per job with every idle worker listening (the comparison is broken)"
    );
}

#[tokio::test]
async fn a_burst_reaches_every_worker_through_the_line_without_a_poll() {
    let app = TestApp::spawn().await;
    let (owner, _) = vidq::app::users::create_user(&app.pool, "alice")
        .await
        .unwrap();
    let claims = Arc::new(AtomicUsize::new(0));
    let workers = start_workers(
        &app,
        4,
        Listeners::HeadOfLine,
        Step::Succeed(Duration::from_millis(300)),
        &claims,
    )
    .await;
    // Exactly one head; the other three wait their turn.
    wait_in_line(&app, 3).await;
    assert_eq!(app.count(&line_lock_sql("count(*)", true)).await, 1);
    // 12 jobs in one commit carry one notification: the head takes one job, and each worker
    // after it must find the rest on its own when its turn comes.
    let mut conn = app.pool.get().await.unwrap();
    conn.transaction::<_, diesel::result::Error, _>(async |conn| {
        vidq::db::synthetic::backlog(conn, owner, 12).await?;
        vidq::db::jobs::notify_claimable(conn).await
    })
    .await
    .unwrap();
    drop(conn);
    wait_for_count(&app, COMPLETED, 12, Duration::from_secs(10)).await;
    assert_eq!(
        app.count("SELECT count(DISTINCT claimed_by) AS n FROM video_encoding_jobs")
            .await,
        4,
        "the head passes its place on, so every worker took jobs of the burst"
    );
    for worker in workers {
        worker.stop().await;
    }
}

#[tokio::test]
async fn when_the_head_loses_its_connection_the_next_in_line_takes_over() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let claims = Arc::new(AtomicUsize::new(0));
    let workers = start_workers(
        &app,
        3,
        Listeners::HeadOfLine,
        Step::Succeed(Duration::ZERO),
        &claims,
    )
    .await;
    wait_in_line(&app, 2).await;
    let head = app.count(&line_lock_sql("min(pid)::bigint", true)).await;
    assert_eq!(
        app.count(&format!(
            "SELECT count(pg_terminate_backend({head}::int)) AS n"
        ))
        .await,
        1
    );
    // The lock went with the session: the next worker in line is the head within moments
    // (the terminated one rejoins at the back).
    wait_for_count(
        &app,
        &line_lock_sql(&format!("count(*) FILTER (WHERE pid <> {head})"), true),
        1,
        Duration::from_secs(3),
    )
    .await;
    app.uploaded_video(&key).await;
    wait_for_count(&app, COMPLETED, 1, Duration::from_secs(3)).await;
    // The worker whose session was killed reconnected and stands in line again.
    wait_in_line(&app, 2).await;
    for worker in workers {
        worker.stop().await;
    }
}

#[tokio::test]
async fn a_claim_that_fails_on_a_broken_connection_is_tried_again_at_once() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let proxy = crate::support::proxy::Proxy::in_front_of(&app.db.url).await;
    // Claims go through the proxy; the line's connection does not, so the head hears the
    // notification and its claim is the one that meets the broken connection.
    let mut settings = fast_settings("blipped");
    settings.poll = Duration::from_secs(60);
    let runner = Arc::new(vidq::queue::runner::Runner {
        pool: vidq::db::connect(&proxy.url_for(&app.db.url), 2)
            .await
            .unwrap(),
        database_url: app.db.url.clone(),
        body: Scripted::new(Step::Succeed(Duration::ZERO)),
        settings,
        on_claim: None,
        health: Default::default(),
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let handle = tokio::spawn(runner.clone().run(stop.clone()));
    wait_for_count(
        &app,
        &line_lock_sql("count(*)", true),
        1,
        Duration::from_secs(10),
    )
    .await;

    proxy.blip();
    app.uploaded_video(&key).await;
    // The poll is a minute away: only the quick retry can pick this job up in time.
    wait_for_count(&app, COMPLETED, 1, Duration::from_secs(3)).await;
    let metrics = runner.health.metrics(1);
    let failed: u64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix("vidq_worker_claims_total{result=\"error\"} "))
        .expect("the failed-claims counter")
        .parse()
        .unwrap();
    assert!(
        failed >= 1,
        "the first claim met the broken connection:\n{metrics}"
    );
    stop.cancel();
    handle.await.unwrap();
}
