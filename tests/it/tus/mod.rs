//! Uploads through vidq: tus 1.0.0 at `/v1/tus/` and the single `PUT .../content`, spooled
//! on the API's node, landed in S3 and confirmed by the real sweeper (woken by NOTIFY), with
//! the protocol's errors (409 offset, 412 version, 415 type, 460 checksum, 410 expired, 413
//! past the length) leaving the offset and the spool file as they were.
//!
//! Here: what a client discovers (OPTIONS, CORS) and an upload from creation to confirmed.
//! The protocol's refusals are in `errors`, termination and expiry in `ending`, one request
//! at a time per upload in `takeover`, and the single PUT in `single_put`.

use reqwest::StatusCode;

use crate::support::app::TestApp;
use crate::support::sweeper::woken_sweeper;
use crate::support::tus::{
    bytes, create, metadata, offset_of, patch, sha1_header, sha256_header, spool_file, tus,
    upload_id, wait_for_state,
};
use crate::support::wait::wait_gone;

mod ending;
mod errors;
mod single_put;
mod takeover;

#[tokio::test]
async fn options_tells_a_client_the_version_extensions_size_limit_and_checksums_without_a_key() {
    let app = TestApp::spawn().await;
    let response = app
        .http
        .request(reqwest::Method::OPTIONS, app.url("/v1/tus/"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let h = response.headers();
    assert_eq!(h["tus-version"], "1.0.0");
    assert_eq!(
        h["tus-extension"],
        "creation,creation-with-upload,termination,checksum,expiration"
    );
    assert_eq!(h["tus-max-size"], (100 * 1024 * 1024).to_string().as_str());
    assert_eq!(h["tus-checksum-algorithm"], "sha1,sha256");
}

#[tokio::test]
async fn a_chunked_tus_upload_is_fsynced_landed_in_s3_and_confirmed_without_the_client() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.start_sweeper(app.storage.clone(), woken_sweeper())
        .await;
    let file = bytes(300_000);
    let url = create(&app, &key, file.len()).await;
    assert!(url.starts_with(&app.url("/v1/tus/")), "{url}");
    let id = upload_id(&url);
    assert_eq!(offset_of(&app, &key, &url).await, 0);
    let status = wait_for_state(&app, &key, &id, "receiving").await;
    assert_eq!(status["received_bytes"], 0);
    assert_eq!(status["via"], "vidq");

    // Three chunks: sha1, sha256, none.
    let (a, rest) = file.split_at(100_000);
    let (b, c) = rest.split_at(100_000);
    let r = patch(&app, &key, &url, 0, a, Some(sha1_header(a))).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.headers()["upload-offset"], "100000");
    assert_eq!(r.headers()["tus-resumable"], "1.0.0");
    let r = patch(&app, &key, &url, 100_000, b, Some(sha256_header(b))).await;
    assert_eq!(r.headers()["upload-offset"], "200000");
    // What the ledger counts is on disk.
    assert_eq!(
        std::fs::read(spool_file(&app, &id)).unwrap(),
        file[..200_000]
    );
    let status = wait_for_state(&app, &key, &id, "receiving").await;
    assert_eq!(status["received_bytes"], 200_000);
    let r = patch(&app, &key, &url, 200_000, c, None).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.headers()["upload-offset"], "300000");

    // Nothing more from the client: the sweeper lands and confirms it.
    let status = wait_for_state(&app, &key, &id, "confirmed").await;
    assert_eq!(status["received_bytes"], 300_000);
    let video_id = status["video_id"]
        .as_str()
        .expect("a video id once confirmed");
    let stored = app
        .storage
        .get_bytes(&format!("originals/{id}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored, file, "S3 holds the bytes the client sent");
    let video = app.video(&key, &video_id).await;
    assert_eq!(video["upload_id"], id.as_str());
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM notification_outbox
              WHERE event_type = 'video.accepted' AND video_id = '{video_id}'"
        ))
        .await,
        1
    );
    // The row is confirmed first, then its spool copy is removed.
    wait_gone(&spool_file(&app, &id)).await;
    assert!(
        !spool_file(&app, &id).exists(),
        "the spool copy goes once S3 has it"
    );
    // A repeat of the last PATCH (its answer lost) is answered, not refused.
    let r = patch(&app, &key, &url, 300_000, &[], None).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert_eq!(r.headers()["upload-offset"], "300000");
}

#[tokio::test]
async fn creation_with_upload_keeps_the_first_chunk_and_answers_its_offset() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let file = bytes(40_000);
    let r = tus(&app, &key, reqwest::Method::POST, &app.url("/v1/tus"))
        .header("Upload-Length", "40000")
        .header("Upload-Metadata", metadata("a.webm", "video/webm"))
        .header("Content-Type", "application/offset+octet-stream")
        .header("Upload-Checksum", sha256_header(&file[..15_000]))
        .body(file[..15_000].to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    assert_eq!(r.headers()["upload-offset"], "15000");
    let url = r.headers()["location"].to_str().unwrap().to_owned();
    let head = tus(&app, &key, reqwest::Method::HEAD, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(head.headers()["upload-length"], "40000");
    let meta = vidq::domain::tus::parse_metadata(Some(
        head.headers()["upload-metadata"].to_str().unwrap(),
    ))
    .unwrap();
    assert_eq!(meta.filename.as_deref(), Some("a.webm"));
    assert_eq!(meta.filetype.as_deref(), Some("video/webm"));
    assert_eq!(offset_of(&app, &key, &url).await, 15_000);
}

#[tokio::test]
async fn browsers_get_preflights_answered_and_the_tus_headers_exposed() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let r = app
        .http
        .request(reqwest::Method::OPTIONS, app.url("/v1/tus/"))
        .header("Origin", "https://app.example")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization, tus-resumable, upload-length, upload-metadata",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "*");
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("PATCH")
    );
    assert!(
        h["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("upload-metadata")
    );
    assert!(!h.contains_key("access-control-allow-credentials"));

    let r = tus(&app, &key, reqwest::Method::POST, &app.url("/v1/tus/"))
        .header("Origin", "https://app.example")
        .header("Upload-Length", "10")
        .header("Upload-Metadata", metadata("a.mp4", "video/mp4"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap();
    for name in [
        "Location",
        "Upload-Offset",
        "Upload-Length",
        "Upload-Expires",
        "Tus-Resumable",
        "Tus-Max-Size",
    ] {
        assert!(exposed.contains(name), "{name} in {exposed}");
    }
}
