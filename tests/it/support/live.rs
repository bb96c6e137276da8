//! Live recordings: created and read through the API, pushed by a real FFmpeg (at once or in
//! real time), read live by FFmpeg's HLS reader, and an API process holding the ingest.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{SPOOL_NODE, TEST_BUCKET, TestApp};
use crate::support::clips;
use crate::support::process::vidq_child;

/// `GET /v1/live/{id}` as its owner sees it.
pub async fn recording_status(app: &TestApp, key: &str, id: &str) -> Value {
    app.get(key, &format!("/v1/live/{id}"))
        .await
        .json()
        .await
        .unwrap()
}

pub async fn create_recording(app: &TestApp, key: &str) -> Value {
    let r = app
        .http
        .post(app.url("/v1/live"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    r.json().await.unwrap()
}

/// FFmpeg making the 6 s clip into an encoder's HLS: three 2 s fMP4 segments and an init;
/// the caller adds where they go.
pub fn hls_encoder() -> tokio::process::Command {
    let mut command = tokio::process::Command::new("ffmpeg");
    command
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(clips::small())
        .args([
            "-c:v",
            "libx264",
            "-g",
            "25",
            "-preset",
            "ultrafast",
            "-c:a",
            "aac",
        ])
        .args(["-f", "hls", "-hls_segment_type", "fmp4", "-hls_time", "2"]);
    command
}

/// Pushes the 6 s clip as three 2 s fMP4 segments to `ingest`.
pub async fn push(ingest: &str) {
    let out = hls_encoder()
        .args(["-hls_playlist_type", "event", "-method", "PUT"])
        .arg(format!("{ingest}index.m3u8"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub async fn playlist_text(app: &TestApp, url: &str) -> String {
    app.http
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

pub async fn uploaded(app: &TestApp, id: &str, n: i64) {
    crate::support::wait::wait_for_count(
        app,
        &format!(
            "SELECT count(*) AS n FROM recording_files WHERE recording_id = '{id}' AND state = 'uploaded'"
        ),
        n,
        std::time::Duration::from_secs(20),
    )
    .await;
}

/// Waits until the live playlist at `playback` lists a segment.
pub async fn playable(app: &TestApp, playback: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = crate::support::live::playlist_text(app, playback).await;
        if text.contains("#EXTINF") {
            return;
        }
        assert!(Instant::now() < deadline, "nothing became playable: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A player reading the live playlist from its start with FFmpeg's HLS reader into `copy`,
/// until the playlist ends (within `within`).
pub async fn read_live(playback: &str, copy: &std::path::Path, within: Duration) {
    let reader = tokio::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-live_start_index", "0", "-i"])
        .arg(playback)
        .args(["-c", "copy", "-f", "mp4"])
        .arg(copy)
        .kill_on_drop(true)
        .output();
    let read = tokio::time::timeout(within, reader)
        .await
        .expect("the reader stops at the end")
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
}

/// The command [`api_process`] runs, to add settings to.
pub fn api_command(
    app: &TestApp,
    http: u16,
    ingest: u16,
    log: &std::path::Path,
) -> tokio::process::Command {
    let mut command = vidq_child("api", log);
    command
        .env("DATABASE_URL", &app.db.url)
        .env("VIDQ_NO_MIGRATE", "true")
        .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{http}"))
        .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{ingest}"))
        .env("VIDQ_SPOOL_DIR", app.spool.path())
        .env("VIDQ_NODE_ID", SPOOL_NODE)
        .env("VIDQ_LIVE_GRACE_SECS", "1")
        .env("VIDQ_PLAYBACK_SECRET", "7".repeat(64))
        .env("VIDQ_S3_ENDPOINT", app.s3.as_ref().unwrap().endpoint())
        .env("VIDQ_S3_BUCKET", TEST_BUCKET)
        .env("VIDQ_S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test-access")
        .env("AWS_SECRET_ACCESS_KEY", "test-secret");
    command
}
