//! The attempt ledger: an attempt that completes is never written to the log (it lives on its
//! job row), every other ending is logged once with the node and start of the claim it ends,
//! and the `job_attempts` view shows every attempt, one row each, in order.

use std::time::Duration;

use vidq::domain::media::MediaError;
use vidq::queue::complete;

use crate::support::app::TestApp;
use crate::support::queue::{claim, expire_lease};
use crate::support::scripted::output;

/// `(attempt, node, outcome, error code)` of each attempt of `job`, in the order they started.
async fn attempts(app: &TestApp, job: i64) -> Vec<(i32, String, Option<String>, Option<String>)> {
    let mut conn = app.pool.get().await.unwrap();
    vidq::db::jobs::attempts_of(&mut conn, job)
        .await
        .unwrap()
        .into_iter()
        .map(|a| {
            (
                a.attempt,
                a.node_id,
                a.outcome.map(|o| o.to_string()),
                a.error_code.map(|c| c.to_string()),
            )
        })
        .collect()
}

fn row(
    attempt: i32,
    node: &str,
    outcome: Option<&str>,
    code: Option<&str>,
) -> (i32, String, Option<String>, Option<String>) {
    (
        attempt,
        node.to_owned(),
        outcome.map(str::to_owned),
        code.map(str::to_owned),
    )
}

#[tokio::test]
async fn an_attempt_that_completes_is_read_from_its_job_row_and_never_logged() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    let running = claim(&app, "node-a", 30.0).await.unwrap();
    let job = running.job_id;
    assert_eq!(
        attempts(&app, job).await,
        [row(1, "node-a", None, None)],
        "the running attempt, open"
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM job_attempts
              WHERE job_id = {job} AND ended_at IS NULL AND started_at = (
                    SELECT claimed_at FROM video_encoding_jobs WHERE id = {job})"
        ))
        .await,
        1,
        "it started when the job was claimed"
    );

    complete::finalize_ready(&app.pool, &running, &output(&running.plan()))
        .await
        .unwrap();
    assert_eq!(
        attempts(&app, job).await,
        [row(1, "node-a", Some("completed"), None)]
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM job_attempts a JOIN video_encoding_jobs j ON j.id = a.job_id
              WHERE a.job_id = {job} AND a.ended_at = j.completed_at AND a.started_at <= a.ended_at
                AND a.claim_token = '{}'",
            running.token
        ))
        .await,
        1,
        "it ended when the job completed"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempt_log").await,
        0,
        "neither the claim nor the READY finalize wrote a ledger row"
    );
}

#[tokio::test]
async fn each_attempt_that_ends_otherwise_is_logged_once_with_the_claims_node_and_start() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;

    // A worker that lost its claim logs it; the claim that takes over the expired lease then
    // finds it logged and keeps that row.
    let zombie = claim(&app, "zombie", 30.0).await.unwrap();
    let job = zombie.job_id;
    let micros = |at: &str| format!("(extract(epoch FROM {at}) * 1000000)::bigint");
    let zombie_started = app
        .count(&format!(
            "SELECT {} AS n FROM video_encoding_jobs WHERE id = {job}",
            micros("claimed_at")
        ))
        .await;
    complete::record_lost(&app.pool, &zombie, "heartbeat fence matched nothing")
        .await
        .unwrap();
    expire_lease(&app, &zombie).await;
    let winner = claim(&app, "winner", 30.0).await.unwrap();
    assert_eq!((winner.job_id, winner.attempt), (job, 2));

    // A retryable error logs the winner's attempt as a retry.
    let retried = complete::fail_or_retry(
        &app.pool,
        &winner,
        &MediaError::retryable(
            vidq::domain::failure::FailureCode::StorageError,
            "the bucket answered 503",
        ),
        Duration::ZERO,
    )
    .await
    .unwrap();
    assert!(retried);
    let last = claim(&app, "last", 30.0).await.unwrap();
    assert_eq!((last.job_id, last.attempt), (job, 3));
    complete::finalize_ready(&app.pool, &last, &output(&last.plan()))
        .await
        .unwrap();

    assert_eq!(
        attempts(&app, job).await,
        [
            row(1, "zombie", Some("lost"), Some("claim_lost")),
            row(2, "winner", Some("retry"), Some("storage_error")),
            row(3, "last", Some("completed"), None),
        ]
    );
    assert_eq!(
        app.count(&format!(
            "SELECT {} AS n FROM job_attempt_log WHERE claim_token = '{}' AND ended_at > started_at",
            micros("started_at"),
            zombie.token
        ))
        .await,
        zombie_started,
        "the lost attempt kept the start of its claim"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempt_log").await,
        2
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM job_attempt_log WHERE claim_token = '{}'
                AND node_id = 'winner' AND attempt = 2",
            winner.token
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn a_claim_that_takes_over_an_expired_lease_logs_the_attempt_it_supersedes() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    let crashed = claim(&app, "crashed", 30.0).await.unwrap();
    expire_lease(&app, &crashed).await;
    let next = claim(&app, "next", 30.0).await.unwrap();
    assert_eq!(next.job_id, crashed.job_id);
    assert_eq!(
        attempts(&app, next.job_id).await,
        [
            row(1, "crashed", Some("lost"), Some("lease_expired")),
            row(2, "next", None, None),
        ]
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM job_attempt_log a JOIN video_encoding_jobs j ON j.id = a.job_id
              WHERE a.claim_token = '{}' AND a.started_at < j.claimed_at AND a.ended_at >= j.claimed_at",
            crashed.token
        ))
        .await,
        1,
        "logged by the claim that superseded it, with its own start"
    );
}
