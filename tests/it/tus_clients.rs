//! Real tus clients, not our own code: `tuspy` (PyPI) and `tus-js-client` (npm, on Node.js)
//! upload a clip through a link that dies mid-upload, resume through their own retry
//! (HEAD, then PATCH from the offset vidq holds), and the clip ends READY without the client
//! doing anything more. `.ci/run` installs both (`tests/clients/`).

use std::sync::Arc;
use std::time::Duration;

use vidq::adapters::ffmpeg::MediaConfig;
use vidq::pipeline::Pipeline;

use crate::support::app::TestApp;
use crate::support::clients::run_client;
use crate::support::clips;
use crate::support::proxy::CutOnce;
use crate::support::queue::{Worker, fast_settings};
use crate::support::sweeper::woken_sweeper;
use crate::support::tus::wait_for_state;
use crate::support::wait::wait_for_count;

async fn a_real_client_resumes_after_a_cut_and_the_clip_ends_ready(program: &str, script: &str) {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.start_sweeper(app.storage.clone(), woken_sweeper())
        .await;
    let work = tempfile::tempdir().unwrap();
    let body = Arc::new(Pipeline {
        storage: app.storage.clone(),
        db: app.pool.clone(),
        media: MediaConfig::default(),
        work_root: work.path().to_owned(),
        waits: Default::default(),
    });
    let worker = Worker::start(&app.db.url, body, fast_settings("tus-client-test")).await;

    let clip = clips::small();
    let size = std::fs::metadata(&clip).unwrap().len();
    // The link dies once, in the middle of the file's bytes.
    let proxy = CutOnce::start(app.base.trim_start_matches("http://").to_owned(), size / 2).await;
    let endpoint = format!("http://127.0.0.1:{}/v1/tus/", proxy.port);
    let done = run_client(program, script, &endpoint, &key, &clip).await;

    assert!(
        proxy.cut.load(std::sync::atomic::Ordering::SeqCst),
        "the link was cut"
    );
    assert!(
        done["retries_seen"].as_u64().unwrap() >= 1,
        "the client resumed after the cut: {done}"
    );
    assert_eq!(done["bytes"].as_u64().unwrap(), size);
    let url = done["upload_url"].as_str().unwrap();
    let id = url.rsplit('/').next().unwrap();
    assert_eq!(
        app.count("SELECT count(*) AS n FROM uploads").await,
        1,
        "the client resumed its upload, it did not start another"
    );
    let status = wait_for_state(&app, &key, id, "confirmed").await;
    let video_id = status["video_id"].as_str().unwrap().to_owned();
    let stored = app
        .storage
        .get_bytes(&format!("originals/{id}"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        stored == std::fs::read(&clip).unwrap(),
        "S3 holds the clip, byte for byte"
    );
    wait_for_count(
        &app,
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{video_id}' AND status = 'ready'"),
        1,
        Duration::from_secs(120),
    )
    .await;
    worker.stop().await;
    let video = app.video(&key, &video_id).await;
    assert_eq!(video["status"], "ready");
    assert!(video["duration_ms"].as_i64().unwrap() >= 5_900);
}

#[tokio::test]
async fn tuspy_resumes_after_a_cut_with_sha1_checksums_and_the_clip_ends_ready() {
    a_real_client_resumes_after_a_cut_and_the_clip_ends_ready("python3", "tus_upload.py").await;
}

#[tokio::test]
async fn tus_js_client_resumes_after_a_cut_and_the_clip_ends_ready() {
    a_real_client_resumes_after_a_cut_and_the_clip_ends_ready("node", "tus_upload.mjs").await;
}
