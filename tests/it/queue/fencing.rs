//! Fencing: a late result from a claim that lost its lease changes nothing (I3), and
//! deleting the uploader while their videos finalize neither deadlocks nor orphans rows.

use std::time::Duration;

use vidq::app::jobs::{self, JobError};
use vidq::domain::media::MediaError;

use super::{claim, video_id};
use crate::harness::TestApp;
use crate::scripted::output;

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
            kind: vidq::domain::job::JobKind::Encode,
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
        kind: vidq::domain::job::JobKind::Encode,
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
                kind: vidq::domain::job::JobKind::Encode,
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
