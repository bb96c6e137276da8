//! What a stopped or killed attempt must not leave behind: an open multipart upload whose
//! parts linger in the bucket, or scratch directories on the node's disk.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::app::TestApp;
use crate::support::fake_encode::FakeEncode;
use crate::support::queue::{Worker, fast_settings};

/// A TCP proxy that forwards what the client sends at about 6 MB/s (a slow uplink), so an
/// upload of a few MB is still under way when the test acts.
async fn slow_uplink(upstream: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                let up = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                        if to_server.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        // The pacing that makes the uplink slow.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    let _ = to_server.shutdown().await;
                };
                let down = tokio::io::copy(&mut from_server, &mut to_client);
                let _ = tokio::join!(up, down);
            });
        }
    });
    addr
}

/// Files the embedded S3 keeps for multipart uploads that are neither completed nor aborted.
fn open_uploads(app: &TestApp) -> Vec<String> {
    std::fs::read_dir(app.s3_root())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".upload"))
        .collect()
}

#[tokio::test]
async fn an_attempt_stopped_mid_upload_aborts_its_multipart_upload() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    let proxy = slow_uplink(app.s3.as_ref().unwrap().addr()).await;
    let storage =
        crate::support::app::storage_client(&format!("http://{proxy}"), Default::default()).await;
    let scratch = tempfile::tempdir().unwrap();
    let body = Arc::new(FakeEncode {
        storage,
        pool: app.pool.clone(),
        root: scratch.path().to_owned(),
        // Above the multipart threshold: three parts, several seconds over the slow link.
        mp4_bytes: (vidq::adapters::storage::MULTIPART_THRESHOLD + 1024 * 1024) as usize,
    });
    let worker = Worker::start(&app.db.url, body, fast_settings("uploader")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while open_uploads(&app).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no multipart upload started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    worker.stop().await; // shutdown: the attempt is stopped mid-upload
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PENDING' AND attempt_count = 0")
            .await,
        1,
        "the attempt was stopped and its claim handed back"
    );
    assert_eq!(open_uploads(&app), Vec::<String>::new(), "no parts linger");
    assert!(
        app.storage
            .list_prefix("videos/")
            .await
            .unwrap()
            .iter()
            .all(|key| !key.ends_with("video.mp4")),
        "the MP4 was never completed"
    );
}

#[tokio::test]
async fn a_starting_worker_removes_scratch_a_killed_worker_left_and_keeps_scratch_in_use() {
    let app = TestApp::spawn().await;
    let root = tempfile::tempdir().unwrap();
    // Left by a worker that was killed: nobody holds it.
    let stale = root.path().join("vidq-job-a1b2c3");
    std::fs::create_dir_all(stale.join("out/hls")).unwrap();
    std::fs::write(stale.join("out/hls/seg_00000.m4s"), b"partial").unwrap();
    // In use by another worker process on the same work root (this test process).
    let live = vidq::pipeline::scratch::Scratch::create(root.path()).unwrap();
    let unrelated = root.path().join("not-vidq");
    std::fs::create_dir(&unrelated).unwrap();

    let mut worker = crate::support::worker::worker_command(&app, "restarted", root.path(), "1")
        .spawn()
        .unwrap();
    let log = root.path().with_extension("log");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("removed stale scratch directories")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the worker removed nothing: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.start_kill().unwrap();
    worker.wait().await.unwrap();
    assert!(!stale.exists(), "the dead worker's scratch is gone");
    assert!(live.path().is_dir(), "scratch in use is kept");
    assert!(unrelated.is_dir(), "only vidq's directories are touched");
}
