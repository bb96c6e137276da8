//! A tus 1.0.0 client in a few requests (create, PATCH, HEAD, checksums), the bytes tests
//! upload, the wait for an upload's state, and where the API's spool keeps an upload.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::Value;
use sha1::Digest;

use crate::support::app::TestApp;

/// Bytes that are not all alike, so a chunk landing at the wrong offset shows.
pub fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

pub fn tus(app: &TestApp, key: &str, method: reqwest::Method, url: &str) -> RequestBuilder {
    app.http
        .request(method, url)
        .bearer_auth(key)
        .header("Tus-Resumable", "1.0.0")
}

pub fn metadata(filename: &str, filetype: &str) -> String {
    format!(
        "filename {},filetype {}",
        STANDARD.encode(filename),
        STANDARD.encode(filetype)
    )
}

/// `POST /v1/tus/` for `length` bytes of MP4; asserts 201 and returns the `Location`.
pub async fn create(app: &TestApp, key: &str, length: usize) -> String {
    let response = tus(app, key, reqwest::Method::POST, &app.url("/v1/tus/"))
        .header("Upload-Length", length.to_string())
        .header("Upload-Metadata", metadata("clip.mp4", "video/mp4"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["tus-resumable"], "1.0.0");
    assert!(response.headers().contains_key("upload-expires"));
    response.headers()["location"].to_str().unwrap().to_owned()
}

pub async fn patch(
    app: &TestApp,
    key: &str,
    url: &str,
    offset: usize,
    chunk: &[u8],
    checksum: Option<String>,
) -> Response {
    let mut request = tus(app, key, reqwest::Method::PATCH, url)
        .header("Upload-Offset", offset.to_string())
        .header("Content-Type", "application/offset+octet-stream")
        .body(chunk.to_vec());
    if let Some(checksum) = checksum {
        request = request.header("Upload-Checksum", checksum);
    }
    request.send().await.unwrap()
}

pub async fn offset_of(app: &TestApp, key: &str, url: &str) -> u64 {
    let response = tus(app, key, reqwest::Method::HEAD, url)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["cache-control"], "no-store");
    response.headers()["upload-offset"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

pub fn sha1_header(chunk: &[u8]) -> String {
    format!("sha1 {}", STANDARD.encode(sha1::Sha1::digest(chunk)))
}

pub fn sha256_header(chunk: &[u8]) -> String {
    format!("sha256 {}", STANDARD.encode(sha2::Sha256::digest(chunk)))
}

pub fn upload_id(url: &str) -> String {
    url.rsplit('/').next().unwrap().to_owned()
}

/// Polls `GET /v1/uploads/{id}` until its state is `state`.
pub async fn wait_for_state(app: &TestApp, key: &str, id: &str, state: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let status: Value = app
            .get(key, &format!("/v1/uploads/{id}"))
            .await
            .json()
            .await
            .unwrap();
        if status["state"] == state {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "upload {id} never became {state}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where the API's spool keeps the bytes of upload `id` (made with its first byte).
pub fn spool_file(app: &TestApp, id: &str) -> std::path::PathBuf {
    app.spool.path().join("uploads").join(id)
}
