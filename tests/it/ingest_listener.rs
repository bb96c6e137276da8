//! The live ingest listener's own limits: a connection that never finishes its request head
//! is closed, so idle or trickling clients cannot hold its connection slots.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::app::TestApp;

#[tokio::test]
async fn a_connection_that_never_finishes_its_request_head_is_closed() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let recording = crate::support::live::create_recording(&app, &key).await;
    let ingest: url::Url = recording["ingest_url"].as_str().unwrap().parse().unwrap();
    let addr = format!("{}:{}", ingest.host_str().unwrap(), ingest.port().unwrap());
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // Half a request head, then nothing.
    slow.write_all(format!("PUT {}index0.m4s HTTP/1.1\r\nHost: x\r\n", ingest.path()).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(Duration::from_secs(30), slow.read(&mut buf))
        .await
        .expect("the listener closes the connection by itself");
    // Closed (0 bytes, or a reset), possibly after a 408 answer; never a request served.
    let answer = String::from_utf8_lossy(&buf[..read.unwrap_or(0)]).into_owned();
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(8) && waited < Duration::from_secs(20),
        "closed after {waited:?} (the limit is {:?})",
        vidq::http::ingest_server::HEADER_READ_TIMEOUT
    );
    // The listener still serves a well-behaved encoder.
    let r = app
        .http
        .put(format!("{ingest}index0.m4s"))
        .body(vec![1u8; 10])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::CREATED);
}
