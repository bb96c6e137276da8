//! One request at a time per upload: a HEAD takes the upload over from a PATCH whose client
//! went quiet (keeping what arrived), and a spool file another process holds is not written
//! until it lets go.

use std::time::Duration;

use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::app::{TestApp, assert_error};
use crate::support::process::wait_until_the_server_has_read;
use crate::support::tus::{
    bytes, create, offset_of, patch, spool_file, tus, upload_id, wait_for_state,
};

/// A PATCH of `first` at offset 0 on a connection of its own, its body chunked, that then
/// neither ends nor fails: a client whose connection went quiet. Returns the connection.
async fn stalled_patch(key: &str, url: &str, first: &[u8]) -> TcpStream {
    let url: url::Url = url.parse().unwrap();
    let host = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut stream = TcpStream::connect(&host).await.unwrap();
    let head = format!(
        "PATCH {} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\
         Tus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\n\
         Content-Type: application/offset+octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n",
        url.path(),
        first.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(first).await.unwrap();
    stream.write_all(b"\r\n").await.unwrap();
    stream
}

/// The status of the response that comes on `stream` (within 30 s).
async fn status_of(stream: &mut TcpStream) -> StatusCode {
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed without an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&answer);
    let code = line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .unwrap_or_else(|| panic!("not an HTTP/1.1 answer: {line}"));
    StatusCode::from_bytes(code.as_bytes()).unwrap()
}

#[tokio::test]
async fn a_head_takes_the_upload_over_from_a_stalled_patch_which_keeps_what_arrived() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let file = bytes(80_000);
    let url = create(&app, &key, file.len()).await;
    let id = upload_id(&url);
    assert!(!spool_file(&app, &id).exists(), "made by the first PATCH");
    let mut stalled = stalled_patch(&key, &url, &file[..30_000]).await;
    // The first bytes reach the server's spool writer: the PATCH holds the upload (its spool
    // file is made then, right before the body is copied) and the server has read every
    // byte sent.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !spool_file(&app, &id).exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the PATCH never took the upload"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_until_the_server_has_read(&stalled).await;
    // The client reconnects and asks for the offset: the stalled PATCH lets go, keeping
    // the bytes it had.
    assert_eq!(offset_of(&app, &key, &url).await, 30_000);
    assert_eq!(status_of(&mut stalled).await, StatusCode::LOCKED);
    let r = patch(&app, &key, &url, 30_000, &file[30_000..], None).await;
    assert_eq!(r.headers()["upload-offset"], "80000");
    wait_for_state(&app, &key, &id, "pending").await;
}

#[tokio::test]
async fn a_spool_file_held_by_another_process_is_not_written_until_it_lets_go() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let file = bytes(20_000);
    let url = create(&app, &key, file.len()).await;
    let id = upload_id(&url);
    patch(&app, &key, &url, 0, &file[..5_000], None).await;
    // Another API process sharing the spool (an flock on its own open file) is writing.
    let other = std::fs::OpenOptions::new()
        .write(true)
        .open(spool_file(&app, &id))
        .unwrap();
    other.lock().unwrap();
    let r = patch(&app, &key, &url, 5_000, &file[5_000..], None).await;
    assert_error(r, StatusCode::LOCKED, "upload_busy").await;
    let r = tus(&app, &key, reqwest::Method::DELETE, &url)
        .send()
        .await
        .unwrap();
    assert_error(r, StatusCode::LOCKED, "upload_busy").await;
    assert_eq!(offset_of(&app, &key, &url).await, 5_000);
    assert_eq!(std::fs::read(spool_file(&app, &id)).unwrap(), file[..5_000]);

    other.unlock().unwrap();
    let r = patch(&app, &key, &url, 5_000, &file[5_000..], None).await;
    assert_eq!(r.headers()["upload-offset"], "20000");
}
