//! The sweeper's orphan pass: objects under a non-live attempt prefix, of a deleted video
//! and under `originals/` with no contract are deleted (and the ledger forgets what it said
//! of them); the pending output rows of dead attempts are forgotten; the current attempt of
//! a running job keeps its objects and rows; one sweeper of the cluster runs it at a time;
//! `vidq reconcile` finds nothing left to say. A READY owes the bucket the attempts it
//! superseded, so they go within a sweeper round even when the worker died after its commit.

use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use vidq::adapters::spool::SpoolRoot;
use vidq::sweeper::{OrphanPass, Sweeper, SweeperSettings};

use crate::support::app::TestApp;
use crate::support::queue::{claim, expire_lease};
use crate::support::reconcile::{expect, reconcile};
use crate::support::scripted::output;

fn settings() -> SweeperSettings {
    SweeperSettings {
        orphans_every: None,
        // Everything in this test is old enough; what is owned must survive anyway.
        orphan_grace: Duration::ZERO,
        ..crate::support::sweeper::woken_sweeper()
    }
}

fn sweeper(app: &TestApp) -> Sweeper<vidq::adapters::storage::Storage> {
    Sweeper::start(
        app.pool.clone(),
        app.storage.clone(),
        SpoolRoot::open(app.spool.path()).unwrap(),
        settings(),
        CancellationToken::new(),
    )
}

async fn put(app: &TestApp, key: &str) {
    app.storage
        .put_bytes(key, b"0123456789".to_vec(), "application/octet-stream")
        .await
        .unwrap();
}

/// Runs one statement for its effect.
async fn exec(app: &TestApp, sql: &str) {
    app.count(&format!(
        "WITH x AS ({sql} RETURNING 1) SELECT count(*) AS n FROM x"
    ))
    .await;
}

/// Registers an artifact row of `video` (run 1) as the worker would.
async fn artifact(app: &TestApp, video: &str, attempt: i32, key: &str, state: &str) {
    let uploaded = if state == "uploaded" { "now()" } else { "NULL" };
    exec(
        app,
        &format!(
            "INSERT INTO video_artifacts (video_id, run, attempt, axis, sequence, object_key,
                                          size_bytes, state, created_at, uploaded_at)
             VALUES ('{video}', 1, {attempt}, 'segment', 0, '{key}', 10, '{state}',
                     now() - interval '1 minute', {uploaded})"
        ),
    )
    .await;
}

#[tokio::test]
async fn the_orphan_pass_deletes_what_no_live_row_owns_and_keeps_the_running_attempt() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;

    // A video whose job runs attempt 2 now: attempt 1 failed after uploading an output.
    let running: Value = app.uploaded_video(&key).await;
    let running = running["id"].as_str().unwrap().to_owned();
    exec(
        &app,
        &format!(
            "UPDATE video_encoding_jobs SET status = 'PROCESSING', attempt_count = 2,
                    claim_token = gen_random_uuid(), claimed_by = 'node-x',
                    lease_until = now() + interval '1 hour'
              WHERE video_id = '{running}'"
        ),
    )
    .await;
    let failed_output = format!("videos/{running}/r1/a1/seg_00000.m4s");
    let current_output = format!("videos/{running}/r1/a2/seg_00000.m4s");
    put(&app, &failed_output).await;
    put(&app, &current_output).await;
    artifact(&app, &running, 1, &failed_output, "uploaded").await;
    artifact(&app, &running, 2, &current_output, "pending").await;

    // Attempt 1's node was killed while it uploaded its MP4 in parts; attempt 2 is uploading
    // its own now.
    let killed_mp4 = format!("videos/{running}/r1/a1/video.mp4");
    let current_mp4 = format!("videos/{running}/r1/a2/video.mp4");
    for key in [&killed_mp4, &current_mp4] {
        app.storage
            .create_multipart(key, "video/mp4")
            .await
            .unwrap();
    }

    // A video whose node died mid-attempt 1: the job is back to PENDING, its row pending.
    let released: Value = app.uploaded_video(&key).await;
    let released = released["id"].as_str().unwrap().to_owned();
    exec(
        &app,
        &format!("UPDATE video_encoding_jobs SET attempt_count = 1 WHERE video_id = '{released}'"),
    )
    .await;
    let dead_output = format!("videos/{released}/r1/a1/never_put.m4s");
    artifact(&app, &released, 1, &dead_output, "pending").await;

    // Objects of a video that no longer exists, and an original nobody contracted.
    let gone = format!("videos/{}/r1/a1/index.m3u8", uuid::Uuid::now_v7());
    let stray = format!("originals/{}", uuid::Uuid::now_v7());
    put(&app, &gone).await;
    put(&app, &stray).await;

    let sweeper = sweeper(&app);
    let pass = sweeper
        .clean_orphans()
        .await
        .unwrap()
        .expect("the lock was free");
    assert_eq!(
        pass,
        OrphanPass {
            objects: 6,
            deleted: 3,
            dead_pending_rows: 1,
            young: 0,
            multiparts_aborted: 1,
        },
        "2 originals + 4 video objects listed; the failed attempt's output, the deleted \
         video's and the stray original deleted; the released attempt's row forgotten; the \
         killed attempt's multipart upload aborted"
    );
    let open: Vec<String> = app
        .storage
        .list_multiparts("")
        .await
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(
        open,
        vec![current_mp4.clone()],
        "the running attempt's upload goes on"
    );
    let mut left = app.storage.list_prefix("videos/").await.unwrap();
    left.sort();
    assert_eq!(
        left,
        vec![current_output.clone()],
        "the running attempt keeps its output"
    );
    assert!(app.storage.list_prefix("originals/").await.unwrap().len() == 2);
    let rows =
        |key: &str| format!("SELECT count(*) AS n FROM video_artifacts WHERE object_key = '{key}'");
    assert_eq!(
        app.count(&rows(&failed_output)).await,
        0,
        "forgotten with its object"
    );
    assert_eq!(
        app.count(&rows(&dead_output)).await,
        0,
        "a dead attempt's pending row"
    );
    assert_eq!(
        app.count(&rows(&current_output)).await,
        1,
        "the running attempt's row"
    );

    // The ledger and the bucket agree: nothing missing, no orphan left.
    expect(&reconcile(&app, &["--grace-secs", "0"]).await, 0);
    // A second pass finds nothing more.
    let again = sweeper.clean_orphans().await.unwrap().unwrap();
    assert_eq!((again.deleted, again.dead_pending_rows), (0, 0));
}

#[tokio::test]
async fn one_sweeper_of_the_cluster_runs_the_orphan_pass_at_a_time() {
    use diesel_async::AsyncConnection;
    let app = TestApp::spawn().await;
    let stray = format!("originals/{}", uuid::Uuid::now_v7());
    put(&app, &stray).await;
    // Another sweeper's session holds the pass.
    let mut other = diesel_async::AsyncPgConnection::establish(&app.db.url)
        .await
        .unwrap();
    let lock = vidq::sweeper::ORPHAN_PASS_LOCK;
    vidq::db::session::advisory_lock(&mut other, lock)
        .await
        .unwrap();
    let sweeper = sweeper(&app);
    assert_eq!(
        sweeper.clean_orphans().await.unwrap(),
        None,
        "it stands aside"
    );
    assert!(app.storage.head(&stray).await.unwrap().is_some());

    vidq::db::session::advisory_unlock(&mut other, lock)
        .await
        .unwrap();
    let pass = sweeper.clean_orphans().await.unwrap().unwrap();
    assert_eq!(pass.deleted, 1);
    assert!(app.storage.head(&stray).await.unwrap().is_none());
    // Its own lock was given back with its connection.
    assert!(
        vidq::db::session::try_advisory_lock(&mut other, lock)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn a_ready_owes_the_attempt_it_superseded_and_a_sweeper_pays_when_the_worker_did_not() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video: Value = app.uploaded_video(&key).await;
    let id = video["id"].as_str().unwrap().to_owned();
    // Attempt 1 stored an output, then lost its lease; attempt 2 wins.
    let zombie = claim(&app, "zombie", 30.0).await.unwrap();
    let dead = format!("videos/{id}/r1/a1/video.mp4");
    artifact(&app, &id, 1, &dead, "uploaded").await;
    put(&app, &dead).await;
    expire_lease(&app, &zombie).await;
    let winner = claim(&app, "winner", 30.0).await.unwrap();
    assert_eq!(winner.attempt, 2);

    // The READY commits and nothing runs after it, as when its worker is SIGKILLed right
    // after the commit: the debt is in the database, and the dead attempt's row is gone.
    vidq::queue::complete::finalize_ready(&app.pool, &winner, &output(&winner.plan()))
        .await
        .unwrap();
    let owed = app
        .count(&format!(
            "SELECT count(*) AS n FROM doomed_objects WHERE is_prefix
                AND key IN ('videos/{id}/r1/a1/', 'videos/{id}/r1/p')"
        ))
        .await;
    assert_eq!(
        owed, 2,
        "the READY transaction owes attempt 1 and the parts"
    );
    let rows = app
        .count(&format!(
            "SELECT count(*) AS n FROM video_artifacts WHERE video_id = '{id}' AND attempt = 1"
        ))
        .await;
    assert_eq!(rows, 0, "attempt 1's ledger rows go with the READY");

    // Due 30 s later (the worker's own deletion comes first), then paid by a sweeper.
    let sweeper = sweeper(&app);
    assert_eq!(sweeper.pay_owed().await.unwrap(), 0, "not due yet");
    assert!(!app.storage.list_prefix(&dead).await.unwrap().is_empty());
    exec(&app, "UPDATE doomed_objects SET next_try_at = now()").await;
    assert_eq!(sweeper.pay_owed().await.unwrap(), 2);
    assert!(
        app.storage
            .list_prefix(&format!("videos/{id}/r1/a1/"))
            .await
            .unwrap()
            .is_empty(),
        "attempt 1's output is still in the bucket"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM doomed_objects").await,
        0
    );
}
