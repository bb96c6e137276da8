//! How claiming and a worker's stop are ordered (`queue::claim_ahead`, "Claims and a stop"):
//! a job whose claim was on its way when the stop came is handed back unstarted, and a job
//! claimed for a slot that no longer listens is handed back at once. The other rules are
//! held by the lifecycle tests (a slot freed at the stop never claims again; the stop waits
//! for the finalizes already sent).

use std::time::Duration;

use diesel_async::RunQueryDsl;
use vidq::queue::NextClaim;
use vidq::queue::claim_ahead::Rider;
use vidq::queue::complete::Completer;

use crate::support::app::TestApp;
use crate::support::queue::{Worker, claim, fast_settings, ready, video_id};
use crate::support::scripted::{Scripted, Step};
use crate::support::wait::wait_for_count;

/// A worker with one slot finishes its first job while another transaction holds the job
/// table, so the claim of its next job, sent ahead of the finalize, waits at the table's
/// lock. The worker is told to stop, and then the table is let go: the claim takes the second
/// job after the stop, and the slot hands it back without starting it (attempt restored,
/// logged `released`), while the first job's finalize commits.
#[tokio::test]
async fn a_job_claimed_as_the_worker_stops_is_handed_back_unstarted() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let first = video_id(&app.uploaded_video(&key).await);
    let second = video_id(&app.uploaded_video(&key).await);
    let body = Scripted::new(Step::Succeed(Duration::from_millis(800)));
    let mut settings = fast_settings("stopping");
    // Nothing but the claim waits at the lock: no renewal, and a lease that outlives the test.
    settings.lease = Duration::from_secs(60);
    settings.heartbeat = None;
    let worker = Worker::start(&app.db.url, body.clone(), settings).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PROCESSING'",
        1,
        Duration::from_secs(10),
    )
    .await;
    let pool = vidq::db::connect(&app.db.url, 1).await.unwrap();
    let mut holder = pool.get_owned().await.unwrap();
    for sql in ["BEGIN", "LOCK TABLE video_encoding_jobs IN EXCLUSIVE MODE"] {
        diesel::sql_query(sql).execute(&mut holder).await.unwrap();
    }
    // The next claim (the only statement that reads the claim's commit setting) waits.
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'
            AND query LIKE '%vidq.claim_synchronous_commit%'",
        1,
        Duration::from_secs(10),
    )
    .await;
    worker.stop.cancel();
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), worker.handle)
        .await
        .expect("the worker stops")
        .unwrap();

    assert_eq!(
        *body.started.lock().unwrap(),
        vec![(first, 1)],
        "the job claimed after the stop never started"
    );
    let status = |video: vidq::domain::ids::VideoId, status: &str, attempts: i32| {
        format!(
            "SELECT count(*) AS n FROM video_encoding_jobs
              WHERE video_id = '{video}' AND status = '{status}' AND attempt_count = {attempts}"
        )
    };
    assert_eq!(app.count(&status(first, "COMPLETED", 1)).await, 1);
    assert_eq!(
        app.count(&status(second, "PENDING", 0)).await,
        1,
        "handed back with its attempt restored"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'released'")
            .await,
        1
    );
}

/// A slot that stopped listening (its task ended) while its next claim was on its way: the
/// job claimed for it is handed back as soon as the claim answers, not left PROCESSING until
/// its lease runs out. Both ways a READY finalize goes: inline (one slot) and through the
/// committers (several).
#[tokio::test]
async fn a_job_claimed_for_a_slot_that_stopped_listening_is_handed_back_at_once() {
    for slots in [1, 2] {
        let app = TestApp::spawn().await;
        let key = app.create_user("alice").await;
        for _ in 0..2 {
            app.uploaded_video(&key).await;
        }
        let first = claim(&app, "node", 60.0).await.unwrap();
        let next = NextClaim {
            node: "node",
            lease: Duration::from_secs(60),
        };
        let completer = Completer::start(app.pool.clone(), next, slots);
        let (rider, listener) = Rider::new();
        drop(listener);
        completer
            .finalize_ready(ready(&first), Some(rider))
            .await
            .expect("the claim was ours");
        assert_eq!(
            app.count(&format!(
                "SELECT count(*) AS n FROM video_encoding_jobs
                  WHERE id = {} AND status = 'COMPLETED'",
                first.job_id
            ))
            .await,
            1,
            "{slots} slots"
        );
        assert_eq!(
            app.count(
                "SELECT count(*) AS n FROM video_encoding_jobs
                  WHERE status = 'PENDING' AND attempt_count = 0"
            )
            .await,
            1,
            "{slots} slots: the job claimed for nobody is back in the queue"
        );
        assert_eq!(
            app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'released'")
                .await,
            1,
            "{slots} slots"
        );
    }
}
