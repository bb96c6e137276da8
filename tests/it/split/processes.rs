//! A split video's parts on `vidq worker` processes, each with its own node id and work
//! directory: two workers share the chunks of one video, and a worker SIGKILLed mid-chunk
//! costs that chunk one more attempt and nothing else.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::process::Child;

use crate::support::app::TestApp;
use crate::support::clips::{self, SplitSource};
use crate::support::media::processes_mentioning;
use crate::support::pipeline::upload_clip;
use crate::support::queue::video_id;
use crate::support::wait::wait_for_count;
use crate::support::worker::worker_command;

/// A worker process that splits sources over 10 s into 8 s chunks of 4 s segments.
fn split_worker(app: &TestApp, node: &str, dir: &Path, ladder: &str) -> Child {
    std::fs::create_dir_all(dir).unwrap();
    worker_command(app, node, dir, "1")
        .env("VIDQ_CHUNK_MIN_SOURCE_SECS", "10")
        .env("VIDQ_CHUNK_SECS", "8")
        .env("VIDQ_SEGMENT_SECS", "4")
        .env("VIDQ_LADDER", ladder)
        .spawn()
        .unwrap()
}

async fn wait_ready(app: &TestApp, id: &dyn std::fmt::Display) {
    wait_for_count(
        app,
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready'"),
        1,
        Duration::from_secs(180),
    )
    .await;
}

#[tokio::test]
async fn two_worker_processes_both_encode_chunks_of_one_video() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let dirs = tempfile::tempdir().unwrap();
    let mut a = split_worker(&app, "enc-a", &dirs.path().join("a"), "240,120");
    let mut b = split_worker(&app, "enc-b", &dirs.path().join("b"), "240,120");
    let clip = clips::split_source(SplitSource::BFrameHeavy);
    let id = video_id(&upload_clip(&app, &key, &clip).await);
    wait_ready(&app, &id).await;
    let nodes = format!(
        "SELECT count(DISTINCT claimed_by) AS n FROM video_encoding_jobs
          WHERE video_id = '{id}' AND kind = 'chunk' AND status = 'COMPLETED'"
    );
    assert_eq!(app.count(&nodes).await, 2, "both workers encoded chunks");
    let events = format!(
        "SELECT count(*) AS n FROM notification_outbox WHERE video_id = '{id}' AND event_type = 'video.ready'"
    );
    assert_eq!(app.count(&events).await, 1);
    for worker in [&mut a, &mut b] {
        worker.start_kill().unwrap();
        worker.wait().await.unwrap();
    }
}

/// Waits until an FFmpeg chunk encode (its graph trims the grid) runs under `dir`.
async fn wait_for_chunk_encode(dir: &Path) {
    let marker = dir.to_string_lossy().into_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !processes_mentioning(&marker).into_iter().any(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains("trim=start_pts"))
            .unwrap_or(false)
    }) {
        assert!(Instant::now() < deadline, "no chunk encode under {marker}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_worker_sigkilled_mid_chunk_costs_that_chunk_one_attempt_and_nothing_else() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let dirs = tempfile::tempdir().unwrap();
    // 720p, one thread: a chunk takes seconds, long enough to be killed in.
    let clip = clips::video(20, 1280, 720);
    let id = video_id(&upload_clip(&app, &key, &clip).await);
    let dir_a = dirs.path().join("a");
    let mut a = split_worker(&app, "enc-a", &dir_a, "720");
    wait_for_chunk_encode(&dir_a).await;
    let killed: i64 = {
        #[derive(diesel::QueryableByName)]
        struct Part {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            part: i32,
        }
        use diesel_async::RunQueryDsl;
        let mut conn = app.pool.get().await.unwrap();
        let running: Vec<Part> = diesel::sql_query(format!(
            "SELECT part FROM video_encoding_jobs WHERE video_id = '{id}' AND kind = 'chunk'
               AND status = 'PROCESSING' AND claimed_by = 'enc-a'"
        ))
        .load(&mut conn)
        .await
        .unwrap();
        assert_eq!(running.len(), 1, "enc-a encodes one chunk");
        i64::from(running[0].part)
    };
    a.start_kill().unwrap(); // SIGKILL: no shutdown hook runs
    a.wait().await.unwrap();
    // Meanwhile its owner sees it encoding, with how far: 3 chunks, the audio, the stitch.
    let seen = app.video(&key, &id).await;
    assert_eq!(seen["status"], "processing", "{seen}");
    assert_eq!(seen["progress"]["total"], 5, "{seen}");
    assert!(seen["progress"]["done"].as_i64().unwrap() < 4, "{seen}");

    let mut b = split_worker(&app, "enc-b", &dirs.path().join("b"), "720");
    wait_ready(&app, &id).await;
    // The killed chunk ran again (its lease expired, enc-a's attempt logged as lost); every
    // other part ran once.
    let again = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE video_id = '{id}' AND parent_id IS NOT NULL AND attempt_count = 2 AND part = {killed}"
    );
    assert_eq!(app.count(&again).await, 1);
    let once = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE video_id = '{id}' AND parent_id IS NOT NULL AND attempt_count = 1"
    );
    let parts = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE video_id = '{id}' AND parent_id IS NOT NULL"
    );
    assert_eq!(app.count(&once).await, app.count(&parts).await - 1);
    let lost = format!(
        "SELECT count(*) AS n FROM job_attempt_log l JOIN video_encoding_jobs j ON j.id = l.job_id
          WHERE j.video_id = '{id}' AND l.outcome = 'lost' AND l.node_id = 'enc-a' AND j.part = {killed}"
    );
    assert_eq!(app.count(&lost).await, 1);
    let events = format!(
        "SELECT count(*) AS n FROM notification_outbox WHERE video_id = '{id}' AND event_type = 'video.ready'"
    );
    assert_eq!(app.count(&events).await, 1);
    b.start_kill().unwrap();
    b.wait().await.unwrap();
}
