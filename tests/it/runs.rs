//! Runs: an operator retry starts a new run with its own keys, ledger rows and attempt budget,
//! every event names its run, each run ends in one terminal event, and the earlier run's
//! objects are gone once the new run is READY.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use vidq::domain::media::MediaError;
use vidq::pipeline::{AttemptPlan, Pipeline};
use vidq::queue::JobBody;

use crate::support::app::TestApp;
use crate::support::cli::{stderr, vidq};
use crate::support::clips;
use crate::support::feed::feed;
use crate::support::pipeline::{pipeline, upload_clip};
use crate::support::queue::{Worker, fast_settings, video_id};
use crate::support::wait::wait_for_count;

/// The real pipeline (every output encoded, stored and confirmed), then a failure, as when
/// storage fails the step after the last PUT: each attempt leaves all its objects behind.
struct FailsAfterStoring(Pipeline);

impl JobBody for FailsAfterStoring {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<vidq::pipeline::Attempted, MediaError>> {
        Box::pin(async move {
            self.0.run(plan, cancel).await?;
            Err(MediaError::retryable(
                vidq::domain::failure::FailureCode::StorageError,
                "injected once every output was stored",
            ))
        })
    }
}

#[tokio::test]
async fn a_retry_with_another_ladder_runs_under_new_keys_and_removes_the_first_run() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = upload_clip(&app, &key, &clips::small()).await;
    let id = video_id(&video);
    let work = tempfile::tempdir().unwrap();
    let failed =
        format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'failed'");
    let ready = format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready'");

    // Run 1 encodes a two-rung ladder; each of its three attempts stores every output, then
    // fails, so the video ends FAILED with three attempts' objects and ledger rows.
    let mut two_rungs = pipeline(&app, work.path());
    two_rungs.media.ladder = vec![240, 120];
    let worker = Worker::start(
        &app.db.url,
        Arc::new(FailsAfterStoring(two_rungs)),
        fast_settings("run-1"),
    )
    .await;
    wait_for_count(&app, &failed, 1, Duration::from_secs(60)).await;
    worker.stop().await;
    let first_run = app
        .storage
        .list_prefix(&format!("videos/{id}/"))
        .await
        .unwrap();
    assert!(
        first_run.iter().any(|k| k.contains("/hls/v1/")),
        "run 1 stored its ladder: {first_run:?}"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome IN ('retry', 'failed')")
            .await,
        3
    );

    // The operator retries; run 2 makes one rung, another set of (axis, sequence) than run 1.
    let job = app
        .count("SELECT max(id) AS n FROM video_encoding_jobs")
        .await;
    let retry = vidq(
        &["jobs", "retry", &job.to_string()],
        &[("DATABASE_URL", app.db.url.as_str())],
    )
    .await;
    assert!(retry.status.success(), "{}", stderr(&retry));
    let mut one_rung = pipeline(&app, work.path());
    one_rung.media.ladder = vec![240];
    let worker = Worker::start(&app.db.url, Arc::new(one_rung), fast_settings("run-2")).await;
    wait_for_count(&app, &ready, 1, Duration::from_secs(60)).await;
    // Stopping drains the attempt, so its clean-up after READY has run.
    worker.stop().await;

    // Run 2 finished in its first attempt: no ledger collision burnt one.
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts").await,
        4,
        "three attempts in run 1, one in run 2"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'completed'")
            .await,
        1
    );

    // Each run ends in exactly one terminal event, and every event names its run.
    let events = feed(&app, &key, 3).await;
    let seen: Vec<(&str, i64)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["data"]["run"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("video.accepted", 1),
            ("video.failed", 1),
            ("video.ready", 2)
        ]
    );

    // What plays is run 2's, and nothing of run 1 is left in storage or in the ledger.
    let api = app.video(&key, &id).await;
    assert_eq!(api["status"], "ready");
    let live = format!("videos/{id}/r2/a1/");
    let left = app
        .storage
        .list_prefix(&format!("videos/{id}/"))
        .await
        .unwrap();
    assert!(!left.is_empty());
    assert!(
        left.iter().all(|k| k.starts_with(&live)),
        "only the live prefix is left: {left:?}"
    );
    assert!(first_run.iter().all(|k| !left.contains(k)));
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM video_artifacts WHERE video_id = '{id}' AND object_key NOT LIKE '{live}%'"
        ))
        .await,
        0
    );
}
