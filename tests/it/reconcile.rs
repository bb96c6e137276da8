//! `vidq reconcile` as an operator runs it (the real binary against the test's database and
//! in-process S3): a READY video reconciles clean; an object lost or rewritten behind the
//! ledger's back is `missing` or `size_mismatch`; strays under a non-live attempt prefix and
//! a deleted video's prefix are orphans only past the grace period; `--fix` deletes them and
//! re-drives an upload through vidq from its spool file.

use std::sync::Arc;
use std::time::Duration;

use vidq::db;
use vidq::domain::ids::{UploadId, VideoId};
use vidq::domain::keys;

use crate::support::app::TestApp;
use crate::support::cli::stderr;
use crate::support::clips;
use crate::support::pipeline::{pipeline, upload_clip};
use crate::support::queue::{Worker, fast_settings, video_id};
use crate::support::reconcile::{expect, reconcile};
use crate::support::wait::wait_for_count;

/// The report line naming `key`, which must say `kind`.
fn line_of<'a>(report: &'a str, kind: &str, key: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.starts_with(&format!("{kind} {key} ")))
        .unwrap_or_else(|| panic!("no `{kind} {key}` line in:\n{report}"))
}

/// A READY video made by the real pipeline; returns its id.
async fn ready_video(app: &TestApp) -> VideoId {
    let key = app.create_user("alice").await;
    let video = upload_clip(app, &key, &clips::small()).await;
    let id = video_id(&video);
    let work = tempfile::tempdir().unwrap();
    let worker = Worker::start(
        &app.db.url,
        Arc::new(pipeline(app, work.path())),
        fast_settings("reconcile"),
    )
    .await;
    let ready = format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready'");
    wait_for_count(app, &ready, 1, Duration::from_secs(60)).await;
    worker.stop().await;
    id
}

#[tokio::test]
async fn a_ready_video_reconciles_clean_and_objects_lost_or_rewritten_are_named() {
    let app = TestApp::spawn().await;
    let id = ready_video(&app).await;
    let report = expect(&reconcile(&app, &["--grace-secs", "0"]).await, 0);
    assert!(report.contains("missing: 0"), "{report}");
    assert!(report.contains("orphan: 0"), "{report}");

    let objects = app
        .storage
        .list_prefix(&keys::video_prefix(id))
        .await
        .unwrap();
    let thumb = objects.iter().find(|k| k.ends_with("thumb.jpg")).unwrap();
    let init = objects.iter().find(|k| k.ends_with("init.mp4")).unwrap();
    app.storage.delete(thumb).await.unwrap();
    app.storage
        .put_bytes(init, b"not the init segment".to_vec(), "video/mp4")
        .await
        .unwrap();

    let output = reconcile(&app, &[]).await;
    let report = expect(&output, 1);
    assert!(report.contains("missing: 1"), "{report}");
    assert!(report.contains("size_mismatch: 1"), "{report}");
    line_of(&report, "missing", thumb);
    assert!(line_of(&report, "size_mismatch", init).contains("object has 20 bytes"));

    // An encoded output cannot be re-driven: --fix says so and the difference stays.
    let fixed = expect(&reconcile(&app, &["--fix"]).await, 1);
    assert!(fixed.contains("cannot be re-driven"), "{fixed}");
    expect(&reconcile(&app, &[]).await, 1);
}

#[tokio::test]
async fn strays_are_orphans_only_past_the_grace_period_and_fix_deletes_them() {
    let app = TestApp::spawn().await;
    let id = ready_video(&app).await;
    let live = app
        .storage
        .list_prefix(&keys::video_prefix(id))
        .await
        .unwrap();
    let stray = keys::attempt_object(id, 1, 9, "thumb.jpg");
    let deleted = keys::attempt_object(VideoId::new(), 1, 1, "video.mp4");
    let original = keys::original(UploadId::new());
    for key in [&stray, &deleted, &original] {
        app.storage
            .put_bytes(key, b"stray".to_vec(), "video/mp4")
            .await
            .unwrap();
    }

    // Just written: uploads or encodes in flight as far as the default grace can tell.
    let report = expect(&reconcile(&app, &[]).await, 0);
    assert!(report.contains("orphan: 0"), "{report}");
    assert!(
        report.contains("3 objects no row owns are younger"),
        "{report}"
    );

    let report = expect(&reconcile(&app, &["--grace-secs", "0"]).await, 1);
    assert!(report.contains("orphan: 3"), "{report}");
    assert!(line_of(&report, "orphan", &stray).contains("not the live attempt r1/a1"));
    assert!(line_of(&report, "orphan", &deleted).contains("does not exist"));
    assert!(line_of(&report, "orphan", &original).contains("no live upload owns it"));

    let json = expect(&reconcile(&app, &["--grace-secs", "0", "--json"]).await, 1);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["counts"]["orphan"], 3);

    let fixed = expect(&reconcile(&app, &["--grace-secs", "0", "--fix"]).await, 0);
    assert_eq!(fixed.matches("fix: deleted").count(), 3, "{fixed}");
    for key in [&stray, &deleted, &original] {
        assert!(app.storage.head(key).await.unwrap().is_none(), "{key}");
    }
    // The live attempt's objects are untouched.
    for key in &live {
        assert!(app.storage.head(key).await.unwrap().is_some(), "{key}");
    }
    expect(&reconcile(&app, &["--grace-secs", "0"]).await, 0);
}

/// An upload through vidq of 1,000 bytes whose spool file is in `spool` and whose ledger
/// row says `state` (the object was never PUT, or was lost since); returns its id and key.
async fn vidq_upload(app: &TestApp, spool: &std::path::Path, state: &str) -> (UploadId, String) {
    let (owner, _) = vidq::app::users::create_user(&app.pool, "alice")
        .await
        .unwrap();
    std::fs::write(spool.join("clip"), vec![7u8; 1000]).unwrap();
    let id = UploadId::new();
    let key = keys::original(id);
    let mut conn = app.pool.get().await.unwrap();
    vidq::bench::sweeper::insert_pending_at(&mut conn, id, owner, "node-a", "clip", 1000)
        .await
        .unwrap();
    let moved = app
        .count(&format!(
            "WITH u AS (UPDATE uploads SET state = '{state}', next_try_at = now() + interval '1 day'
                         WHERE id = '{}' RETURNING 1) SELECT count(*) AS n FROM u",
            id.0
        ))
        .await;
    assert_eq!(moved, 1);
    (id, key)
}

#[tokio::test]
async fn fix_puts_a_confirmed_upload_through_vidq_again_from_its_spool_and_not_without_it() {
    let app = TestApp::spawn().await;
    let spool = tempfile::tempdir().unwrap();
    let (id, key) = vidq_upload(&app, spool.path(), "confirmed").await;
    let spool_dir = spool.path().to_str().unwrap();

    // Without its spool file on this node, nothing can be re-driven.
    let elsewhere = tempfile::tempdir().unwrap();
    let report = expect(
        &reconcile(
            &app,
            &["--fix", "--spool-dir", elsewhere.path().to_str().unwrap()],
        )
        .await,
        1,
    );
    assert!(
        report.contains("cannot be re-driven: spool_missing"),
        "{report}"
    );

    let fixed = expect(
        &reconcile(&app, &["--fix", "--spool-dir", spool_dir]).await,
        0,
    );
    assert!(
        fixed.contains("fix: PUT again from the spool file"),
        "{fixed}"
    );
    assert_eq!(app.storage.head(&key).await.unwrap().unwrap().size, 1000);
    // The contract stays confirmed (its video must not be confirmed twice).
    let mut conn = app.pool.get().await.unwrap();
    assert_eq!(
        db::uploads::sweep::entry(&mut conn, id)
            .await
            .unwrap()
            .state,
        "confirmed"
    );
    expect(&reconcile(&app, &[]).await, 0);
}

#[tokio::test]
async fn a_bad_grace_is_a_usage_error() {
    let app = TestApp::spawn().await;
    let output = reconcile(&app, &["--grace-secs", "-1"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}
