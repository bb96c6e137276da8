//! Fencing: a late result from a claim that lost its lease changes nothing (I3), and
//! deleting the uploader while their videos finalize neither deadlocks nor orphans rows.

use std::time::Duration;

use vidq::domain::media::MediaError;
use vidq::queue::JobError;
use vidq::queue::complete;

use crate::support::app::TestApp;
use crate::support::queue::{claim, expire_lease, video_id};
use crate::support::scripted::output;

#[tokio::test]
async fn a_late_result_after_the_lease_expired_and_another_node_reclaimed_changes_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let zombie = claim(&app, "zombie", 30.0).await.unwrap();
    expire_lease(&app, &zombie).await;
    let winner = claim(&app, "winner", 30.0).await.unwrap();
    assert_eq!(
        (zombie.job_id, zombie.attempt, winner.attempt),
        (winner.job_id, 1, 2)
    );

    let before = app
        .count("SELECT count(*) AS n FROM notification_outbox")
        .await;
    let late = complete::finalize_ready(&app.pool, &zombie, &output(&zombie.plan())).await;
    assert!(matches!(late, Err(JobError::ClaimLost)), "{late:?}");
    let failed = complete::finalize_failed(
        &app.pool,
        &zombie,
        &MediaError::permanent(vidq::domain::failure::FailureCode::InvalidMedia, "late"),
    )
    .await;
    assert!(matches!(failed, Err(JobError::ClaimLost)));
    let retried = complete::fail_or_retry(
        &app.pool,
        &zombie,
        &MediaError::retryable(vidq::domain::failure::FailureCode::EncodeFailed, "late"),
        Duration::ZERO,
    )
    .await;
    assert!(matches!(retried, Err(JobError::ClaimLost)));
    assert!(matches!(
        complete::release(&app.pool, &zombie).await,
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
    let plan = winner.plan();
    complete::finalize_ready(&app.pool, &winner, &output(&plan))
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
        let finalizes =
            futures_util::future::join_all(claims.iter().map(|c| async {
                complete::finalize_ready(&app.pool, c, &output(&c.plan())).await
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

#[derive(diesel::QueryableByName)]
struct Setting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    value: String,
}

async fn commit_mode(conn: &mut diesel_async::AsyncPgConnection) -> String {
    use diesel_async::RunQueryDsl;
    let row: Setting = diesel::sql_query("SELECT current_setting('synchronous_commit') AS value")
        .get_result(conn)
        .await
        .unwrap();
    row.value
}

/// `synchronous_commit` inside a transaction (rolled back) that claimed a job: the claim's own
/// setting, read back.
async fn mode_inside_a_claim(conn: &mut diesel_async::AsyncPgConnection) -> String {
    use diesel_async::AsyncConnection;
    let mut inside = String::new();
    let rolled_back = conn
        .transaction::<(), diesel::result::Error, _>(async |c| {
            let claimed = vidq::db::jobs::claim(c, "probe", 30.0).await?;
            assert!(claimed.is_some());
            inside = commit_mode(c).await;
            Err(diesel::result::Error::RollbackTransaction)
        })
        .await;
    assert!(rolled_back.is_err());
    inside
}

#[tokio::test]
async fn the_claim_alone_commits_without_waiting_for_its_wal_flush() {
    use diesel_async::AsyncConnection;
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    app.uploaded_video(&key).await;
    let mut conn = app.pool.get().await.unwrap();
    assert_eq!(commit_mode(&mut conn).await, "on");
    // Inside a transaction (rolled back) the claim's own setting can be read back...
    assert_eq!(
        mode_inside_a_claim(&mut conn).await,
        "off",
        "the claim's transaction commits asynchronously"
    );
    assert_eq!(
        commit_mode(&mut conn).await,
        "on",
        "and the connection's next transaction does not"
    );
    // ...and an autocommitted claim, as a worker runs it, leaves the session synchronous:
    // the finalize that follows on the same pooled connection waits for its flush.
    assert!(
        vidq::db::jobs::claim(&conn, "node", 30.0)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(commit_mode(&mut conn).await, "on");
    // A session that asks for synchronous claims (the benchmark's other row) gets them.
    let url = vidq::db::jobs::with_synchronous_claims(&app.db.url).unwrap();
    let mut synchronous = diesel_async::AsyncPgConnection::establish(&url)
        .await
        .unwrap();
    app.uploaded_video(&key).await;
    assert_eq!(
        mode_inside_a_claim(&mut synchronous).await,
        "on",
        "a synchronous session's claim waits for its flush"
    );
}

/// What PostgreSQL's crash recovery leaves of a claim whose commit was not yet flushed: the
/// job as it was before the claim. The claim wrote nothing else: its attempt lives on the job
/// row until it ends.
async fn lose_the_claim(app: &TestApp, claim: &vidq::queue::Claim) {
    let changed = app
        .count(&format!(
            "WITH reverted AS (
            UPDATE video_encoding_jobs
               SET status = 'PENDING', attempt_count = attempt_count - 1, claim_token = NULL,
                   claimed_by = NULL, claimed_at = NULL, lease_until = NULL
             WHERE id = {} AND claim_token = '{}' RETURNING 1)
         SELECT (SELECT count(*) FROM reverted)
              + (SELECT count(*) FROM job_attempt_log WHERE claim_token = '{}') AS n",
            claim.job_id, claim.token, claim.token
        ))
        .await;
    assert_eq!(changed, 1, "the job row, and no logged attempt");
}

#[tokio::test]
async fn a_claim_lost_with_a_database_crash_writes_nothing_and_the_next_claim_takes_its_number() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video =
        crate::support::pipeline::upload_clip(&app, &key, &crate::support::clips::small()).await;
    let id = video_id(&video);
    let lost = claim(&app, "crashed", 60.0).await.unwrap();
    lose_the_claim(&app, &lost).await;
    let next = claim(&app, "next", 60.0).await.unwrap();
    assert_eq!(
        (next.job_id, next.attempt, next.run),
        (lost.job_id, lost.attempt, lost.run),
        "the same attempt number, so the same object prefix"
    );
    assert_ne!(next.token, lost.token);

    // The worker answered with the lost claim encodes, and then stops at its first write:
    // no artifact row, no object.
    let work = tempfile::tempdir().unwrap();
    let pipeline = crate::support::pipeline::pipeline(&app, work.path());
    let stopped = pipeline
        .run(&lost.plan(), &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(stopped.code, "claim_lost", "{stopped:?}");
    let artifacts = format!("SELECT count(*) AS n FROM video_artifacts WHERE video_id = '{id}'");
    assert_eq!(app.count(&artifacts).await, 0);
    let prefix = format!("videos/{id}/");
    assert!(app.storage.list_prefix(&prefix).await.unwrap().is_empty());
    let late = complete::finalize_ready(&app.pool, &lost, &output(&lost.plan())).await;
    assert!(matches!(late, Err(JobError::ClaimLost)), "{late:?}");

    // The next claim's attempt writes under that number and lands.
    let made = pipeline
        .run(&next.plan(), &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap()
        .ready()
        .unwrap();
    complete::finalize_ready(&app.pool, &next, &made)
        .await
        .unwrap();
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready'
                AND live_attempt = {}",
            next.attempt
        ))
        .await,
        1
    );
    assert!(app.count(&artifacts).await > 0);
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM job_attempts WHERE job_id = {}",
            next.job_id
        ))
        .await,
        1,
        "the lost attempt is not counted"
    );
}
