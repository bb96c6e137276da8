//! Attempts that go wrong in ways the queue must absorb: a job body that panics, ledger
//! writes that hold every pooled connection while heartbeats are due, and transient database
//! errors inside the finalize transaction.

use std::sync::Arc;
use std::time::Duration;

use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use vidq::domain::media::MediaError;
use vidq::pipeline::AttemptPlan;
use vidq::queue::JobBody;
use vidq::queue::runner::Runner;

use crate::support::app::TestApp;
use crate::support::fake_encode::FakeEncode;
use crate::support::queue::{Worker, fast_settings, video_id};
use crate::support::scripted::{Scripted, Step, output};
use crate::support::wait::{wait_for_count, wait_for_lock_waits};

/// Panics in its first attempt, succeeds in any later one.
struct PanicsFirst;

impl JobBody for PanicsFirst {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<vidq::pipeline::Attempted, MediaError>> {
        Box::pin(async move {
            assert!(plan.attempt > 1, "a bug in the first attempt");
            Ok(output(plan).into())
        })
    }
}

#[tokio::test]
async fn a_panicking_attempt_stops_its_heartbeat_and_is_retried_within_one_lease() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let id = video_id(&app.uploaded_video(&key).await);
    let settings = fast_settings("panicky");
    let lease = settings.lease;
    let worker = Worker::start(&app.db.url, Arc::new(PanicsFirst), settings).await;
    // Recorded as a failed, retryable attempt, not left to a heartbeat that renews forever.
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM job_attempts
          WHERE attempt = 1 AND outcome = 'retry' AND error_code = 'internal_error'",
        1,
        lease,
    )
    .await;
    wait_for_count(
        &app,
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready' AND live_attempt = 2"),
        1,
        Duration::from_secs(10),
    )
    .await;
    worker.stop().await;
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        1
    );
}

#[tokio::test]
async fn heartbeats_renew_while_ledger_writes_hold_every_pooled_connection() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    for _ in 0..4 {
        app.uploaded_video(&key).await;
    }
    // A long lock on the ledger (a slow migration, a VACUUM FULL, a stuck session): every
    // ledger write waits, each holding one of the worker's pooled connections.
    let mut locker = vidq::db::pool::dedicated(&app.db.url).await.unwrap();
    diesel::sql_query("BEGIN")
        .execute(&mut locker)
        .await
        .unwrap();
    diesel::sql_query("LOCK TABLE video_artifacts IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();

    let scratch = tempfile::tempdir().unwrap();
    let pool = vidq::db::connect(&app.db.url, vidq::roles::worker::WORKER_POOL_SIZE)
        .await
        .unwrap();
    let mut settings = fast_settings("busy");
    settings.slots = 4;
    let lease = settings.lease;
    let runner = Arc::new(Runner {
        pool: pool.clone(),
        database_url: app.db.url.clone(),
        body: Arc::new(FakeEncode {
            storage: app.storage.clone(),
            pool,
            root: scratch.path().to_owned(),
            mp4_bytes: 1000,
        }),
        settings,
        on_claim: None,
        health: Default::default(),
    });
    let stop = CancellationToken::new();
    let handle = tokio::spawn(runner.run(stop.clone()));

    // Both pooled connections wait on the lock (two attempts started, each blocked in its
    // ledger write); held for longer than a lease.
    wait_for_lock_waits(&app, 2).await;
    // Real time on purpose: the heartbeats must keep the leases through a lock held for
    // longer than one lease.
    tokio::time::sleep(lease + lease / 2).await;
    diesel::sql_query("COMMIT")
        .execute(&mut locker)
        .await
        .unwrap();

    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        4,
        Duration::from_secs(30),
    )
    .await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(40), handle)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome <> 'completed'")
            .await,
        0,
        "no claim was lost while its attempt waited"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE attempt_count = 1")
            .await,
        4
    );
}

/// Makes the finalize's `UPDATE videos SET status = 'ready'` fail on its first tries: a
/// serialization failure, a session the server ends (the connection breaks mid-transaction),
/// a deadlock. A sequence counts the tries, since it is not rolled back with them.
const FAULTS: &str = "
CREATE SEQUENCE finalize_tries;
CREATE FUNCTION finalize_fault() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE try bigint;
BEGIN
  IF NEW.status = 'ready' THEN
    try := nextval('finalize_tries');
    IF try = 1 THEN
      RAISE EXCEPTION 'could not serialize access' USING ERRCODE = 'serialization_failure';
    ELSIF try = 2 THEN
      PERFORM pg_terminate_backend(pg_backend_pid());
    ELSIF try = 3 THEN
      RAISE EXCEPTION 'deadlock detected' USING ERRCODE = 'deadlock_detected';
    END IF;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER finalize_fault BEFORE UPDATE ON videos FOR EACH ROW EXECUTE FUNCTION finalize_fault();
";

#[tokio::test]
async fn transient_database_errors_in_finalize_are_retried_within_the_same_attempt() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let id = video_id(&app.uploaded_video(&key).await);
    let mut conn = app.pool.get().await.unwrap();
    conn.batch_execute(FAULTS).await.unwrap();
    drop(conn);
    let body = Scripted::new(Step::Succeed(Duration::ZERO));
    let worker = Worker::start(&app.db.url, body.clone(), fast_settings("node")).await;
    wait_for_count(
        &app,
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready'"),
        1,
        Duration::from_secs(10),
    )
    .await;
    worker.stop().await;
    assert_eq!(
        body.started.lock().unwrap().len(),
        1,
        "the first attempt's result landed"
    );
    assert_eq!(
        app.count("SELECT last_value AS n FROM finalize_tries")
            .await,
        4,
        "three failed tries, the fourth committed"
    );
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM job_attempts WHERE attempt = 1 AND outcome = 'completed'"
        )
        .await,
        1
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        1
    );
}
