//! `vidq worker` as a child process, and its health listener probed.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::process::Command;

use crate::support::app::{TEST_BUCKET, TestApp};
use crate::support::process::vidq_child;

/// `vidq worker` against the test's database, S3 and a short lease; the log goes next to
/// `work_dir`.
pub fn worker_command(app: &TestApp, node: &str, work_dir: &Path, threads: &str) -> Command {
    let mut command = vidq_child("worker", &work_dir.with_extension("log"));
    command
        .env("DATABASE_URL", &app.db.url)
        .env("VIDQ_S3_ENDPOINT", app.s3.as_ref().unwrap().endpoint())
        .env("VIDQ_S3_BUCKET", TEST_BUCKET)
        .env("VIDQ_S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test-access")
        .env("AWS_SECRET_ACCESS_KEY", "test-secret")
        .env("VIDQ_NODE_ID", node)
        .env("VIDQ_LEASE_SECS", "2")
        .env("VIDQ_HEARTBEAT_SECS", "1")
        .env("VIDQ_POLL_MS", "100")
        .env("VIDQ_FFMPEG_THREADS", threads)
        .env("VIDQ_WORK_DIR", work_dir);
    command
}

/// GETs `path` from a worker's health listener: status and body.
async fn probe(port: u16, path: &str) -> Option<(u16, String)> {
    let response = reqwest::get(format!("http://127.0.0.1:{port}{path}"))
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Polls `path` until it answers `status`; returns the body.
pub async fn probe_until(port: u16, path: &str, status: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let got = probe(port, path).await;
        if let Some((s, body)) = &got
            && *s == status
        {
            return body.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{path} did not answer {status} within {within:?}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
