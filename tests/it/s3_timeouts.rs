//! An S3 that accepts connections and never answers: every call vidq makes gives up within
//! its bounds, and what depends on S3 says so instead of hanging.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use vidq::adapters::storage::Storage;
use vidq::config::S3Timeouts;

use crate::support::app::{TestApp, assert_error};

/// Short bounds, so a hang shows as a failed test within seconds.
const SHORT: S3Timeouts = S3Timeouts {
    connect_ms: 500,
    read_secs: 1,
    operation_secs: 2,
    transfer_secs: 2,
    stall_secs: 1,
};

/// Longest any of these calls may take with [`SHORT`]: a transfer's three tries of 2 s
/// each, plus slack for a loaded machine. Before the bounds, each waited forever.
const PROMPT: Duration = Duration::from_secs(15);

/// A TCP listener that accepts every connection, reads nothing and never writes.
async fn black_hole() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://{addr}")
}

async fn silent_storage(endpoint: &str) -> Storage {
    silent_storage_with(endpoint, SHORT).await
}

async fn silent_storage_with(endpoint: &str, timeouts: S3Timeouts) -> Storage {
    crate::support::app::storage_client(endpoint, timeouts).await
}

/// Runs `call`, failing the test if it takes longer than [`PROMPT`].
async fn promptly<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    let started = Instant::now();
    let out = tokio::time::timeout(PROMPT, call)
        .await
        .unwrap_or_else(|_| panic!("{what} still waits on S3 after {PROMPT:?}"));
    eprintln!("{what} answered in {:?}", started.elapsed());
    out
}

#[tokio::test]
async fn an_s3_that_never_answers_makes_readyz_confirm_and_delete_answer_promptly() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    // Everything S3 needs is in place first: an uploaded object to confirm, a video to delete.
    let video = app.uploaded_video(&key).await;
    let bytes = b"another fake video".to_vec();
    let upload = app.create_upload(&key, bytes.len()).await;
    assert!(app.put_to(&upload, bytes).await.status().is_success());

    // The same API, with its bucket behind an S3 that never answers.
    let mut ctx = app.ctx.clone();
    ctx.storage = silent_storage(&black_hole().await).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    tokio::spawn(vidq::http::serve(listener, ctx, shutdown).unwrap());

    let response = promptly("GET /readyz", app.http.get(format!("{base}/readyz")).send())
        .await
        .unwrap();
    // Ready all the same (ingest needs only the spool and the database); storage named.
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["storage"], "unavailable", "{body}");
    assert_eq!(body["database"], "ok", "{body}");

    let id = upload["upload_id"].as_str().unwrap();
    let response = promptly(
        "POST confirm",
        app.http
            .post(format!("{base}/v1/uploads/{id}/confirm"))
            .bearer_auth(&key)
            .send(),
    )
    .await
    .unwrap();
    assert_error(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_unavailable",
    )
    .await;
    assert_eq!(
        app.count("SELECT count(*) AS n FROM videos").await,
        1,
        "a confirm S3 could not check made no video"
    );

    // The rows go; the objects S3 could not delete stay in the bucket (logged with their keys).
    let video_id = video["id"].as_str().unwrap();
    let response = promptly(
        "DELETE video",
        app.http
            .delete(format!("{base}/v1/videos/{video_id}"))
            .bearer_auth(&key)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(app.count("SELECT count(*) AS n FROM videos").await, 0);
}

/// With the default S3 limits (whose small calls may take 30 s), readiness and a video's
/// deletion still answer within their own budgets.
#[tokio::test]
async fn with_the_default_limits_readyz_and_delete_answer_within_their_budgets() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let mut ctx = app.ctx.clone();
    ctx.storage = silent_storage_with(&black_hole().await, S3Timeouts::default()).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    tokio::spawn(vidq::http::serve(listener, ctx, shutdown).unwrap());
    let slack = Duration::from_secs(3);

    let started = Instant::now();
    let response = app.http.get(format!("{base}/readyz")).send().await.unwrap();
    let waited = started.elapsed();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["storage"], "unavailable", "{body}");
    assert!(
        waited < vidq::http::routes::health::READINESS_BUDGET + slack,
        "readyz took {waited:?}"
    );

    let video_id = video["id"].as_str().unwrap();
    let started = Instant::now();
    let response = app
        .http
        .delete(format!("{base}/v1/videos/{video_id}"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert!(
        waited < vidq::app::videos::OBJECT_DELETION_BUDGET + slack,
        "DELETE took {waited:?}"
    );
    assert_eq!(app.count("SELECT count(*) AS n FROM videos").await, 0);
}

#[tokio::test]
async fn every_storage_call_gives_up_within_its_bounds() {
    let storage = silent_storage(&black_hole().await).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("small.bin");
    std::fs::write(&file, vec![7u8; 4096]).unwrap();
    assert!(promptly("HEAD", storage.head("k")).await.is_err());
    assert!(
        promptly("HeadBucket", storage.check_bucket())
            .await
            .is_err()
    );
    assert!(promptly("DELETE", storage.delete("k")).await.is_err());
    assert!(
        promptly("DeleteObjects", storage.delete_prefix("videos/"))
            .await
            .is_err()
    );
    assert!(
        promptly("PUT", storage.put_file("k", &file, "video/mp4"))
            .await
            .is_err()
    );
    let target = dir.path().join("down.bin");
    assert!(
        promptly("GET", storage.download_to_file("k", &target))
            .await
            .is_err()
    );
}
