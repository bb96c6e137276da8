//! The protocol's refusals: a PATCH's errors (409 offset, 412 version, 415 type, 460
//! checksum, 400 algorithm, 413 past the length) leave the offset and the spool file as they
//! were, and a creation is refused for other types, sizes out of range, missing or bad
//! headers and no key.

use reqwest::StatusCode;

use crate::support::app::{TestApp, assert_error};
use crate::support::tus::{
    bytes, create, metadata, offset_of, patch, sha1_header, spool_file, tus, upload_id,
    wait_for_state,
};

#[tokio::test]
async fn protocol_errors_leave_the_offset_and_the_spool_file_as_they_were() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let file = bytes(50_000);
    let url = create(&app, &key, file.len()).await;
    let id = upload_id(&url);
    let r = patch(&app, &key, &url, 0, &file[..20_000], None).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);

    // 412: another protocol version, with the version vidq speaks.
    let r = app
        .http
        .head(&url)
        .bearer_auth(&key)
        .header("Tus-Resumable", "0.2.2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PRECONDITION_FAILED);
    assert_eq!(r.headers()["tus-version"], "1.0.0");
    // 415: a PATCH that is not application/offset+octet-stream.
    let r = tus(&app, &key, reqwest::Method::PATCH, &url)
        .header("Upload-Offset", "20000")
        .header("Content-Type", "application/octet-stream")
        .body(file[20_000..].to_vec())
        .send()
        .await
        .unwrap();
    assert_error(
        r,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    // 409: an offset other than the one held.
    let r = patch(&app, &key, &url, 10_000, &file[10_000..], None).await;
    let body = assert_error(r, StatusCode::CONFLICT, "offset_mismatch").await;
    assert!(body["error"]["message"].as_str().unwrap().contains("20000"));
    // 460: a checksum that does not match; nothing of the chunk is kept.
    let wrong = sha1_header(b"something else");
    let r = patch(&app, &key, &url, 20_000, &file[20_000..], Some(wrong)).await;
    assert_eq!(r.status().as_u16(), 460);
    // 400: an algorithm nobody computes.
    let r = patch(
        &app,
        &key,
        &url,
        20_000,
        &file[20_000..],
        Some("md5 AAAA".into()),
    )
    .await;
    assert_error(r, StatusCode::BAD_REQUEST, "bad_request").await;
    // 413: bytes past the upload's length.
    let mut long = file[20_000..].to_vec();
    long.push(0);
    let r = patch(&app, &key, &url, 20_000, &long, None).await;
    assert_error(r, StatusCode::PAYLOAD_TOO_LARGE, "too_large").await;

    assert_eq!(offset_of(&app, &key, &url).await, 20_000);
    assert_eq!(
        std::fs::read(spool_file(&app, &id)).unwrap(),
        file[..20_000],
        "the refused chunks left nothing on disk"
    );
    // And the upload goes on from there.
    let r = patch(
        &app,
        &key,
        &url,
        20_000,
        &file[20_000..],
        Some(sha1_header(&file[20_000..])),
    )
    .await;
    assert_eq!(r.headers()["upload-offset"], "50000");
    let status = wait_for_state(&app, &key, &id, "pending").await;
    assert_eq!(status["received_bytes"], 50_000);
}

#[tokio::test]
async fn creation_is_refused_for_non_video_types_oversize_lengths_and_missing_headers() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let post = |length: &str, meta: Option<String>| {
        let mut request = tus(&app, &key, reqwest::Method::POST, &app.url("/v1/tus/"))
            .header("Upload-Length", length);
        if let Some(meta) = meta {
            request = request.header("Upload-Metadata", meta);
        }
        request.send()
    };
    let hls = metadata("clip.mp4", "application/vnd.apple.mpegurl");
    assert_error(
        post("10", Some(hls)).await.unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    let missing = assert_error(
        post("10", None).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("filetype")
    );
    let mp4 = metadata("clip.mp4", "video/mp4");
    let over = (100 * 1024 * 1024 + 1).to_string();
    assert_error(
        post(&over, Some(mp4.clone())).await.unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
    )
    .await;
    assert_error(
        post("-1", Some(mp4.clone())).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    let empty = assert_error(
        post("0", Some(mp4.clone())).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(
        empty["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Upload-Length")
    );
    assert_error(
        post("10", Some("filename !!".into())).await.unwrap(),
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    let r = app
        .http
        .post(app.url("/v1/tus/"))
        .header("Tus-Resumable", "1.0.0")
        .header("Upload-Length", "10")
        .header("Upload-Metadata", mp4)
        .send()
        .await
        .unwrap();
    assert_error(r, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(app.count("SELECT count(*) AS n FROM uploads").await, 0);
}
