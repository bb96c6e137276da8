//! Uploads through vidq: tus 1.0.0 at `/v1/tus/` and the single `PUT .../content`, spooled
//! on the API's node, landed in S3 and confirmed by the real sweeper (woken by NOTIFY), with
//! the protocol's errors (409 offset, 412 version, 415 type, 460 checksum, 410 expired, 413
//! past the length) leaving the offset and the spool file as they were.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sha1::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::app::{TestApp, assert_error};
use crate::support::process::wait_until_the_server_has_read;
use crate::support::sweeper::woken_sweeper;
use crate::support::tus::{
    bytes, create, metadata, offset_of, patch, sha1_header, sha256_header, tus, upload_id,
    wait_for_state,
};

/// Waits (up to 10 s) for `path` to be gone; the caller asserts it.
async fn wait_gone(path: &std::path::Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while path.exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spool_file(app: &TestApp, id: &str) -> std::path::PathBuf {
    app.spool.path().join("uploads").join(id)
}

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
async fn termination_drops_the_upload_and_its_bytes_and_a_stranger_sees_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let mallory = app.create_user("mallory").await;
    let file = bytes(10_000);
    let url = create(&app, &key, file.len()).await;
    let id = upload_id(&url);
    patch(&app, &key, &url, 0, &file[..5_000], None).await;

    // A stranger's requests read as unknown ids and change nothing.
    for method in [reqwest::Method::HEAD, reqwest::Method::DELETE] {
        let r = tus(&app, &mallory, method, &url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }
    let r = patch(&app, &mallory, &url, 5_000, &file[5_000..], None).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_error(
        app.get(&mallory, &format!("/v1/uploads/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_eq!(offset_of(&app, &key, &url).await, 5_000);

    let r = tus(&app, &key, reqwest::Method::DELETE, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(!spool_file(&app, &id).exists());
    let r = tus(&app, &key, reqwest::Method::HEAD, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // A single PUT never starts over bytes that came through tus.
    let url2 = create(&app, &key, file.len()).await;
    patch(&app, &key, &url2, 0, &file[..100], None).await;
    let r = app
        .http
        .put(app.url(&format!("/v1/uploads/{}/content", upload_id(&url2))))
        .bearer_auth(&key)
        .body(file.clone())
        .send()
        .await
        .unwrap();
    assert_error(r, StatusCode::CONFLICT, "wrong_upload_method").await;
    assert_eq!(offset_of(&app, &key, &url2).await, 100);

    // A complete upload is the ledger's now: it cannot be terminated.
    let url = create(&app, &key, file.len()).await;
    patch(&app, &key, &url, 0, &file, None).await;
    let r = tus(&app, &key, reqwest::Method::DELETE, &url)
        .send()
        .await
        .unwrap();
    assert_error(r, StatusCode::CONFLICT, "upload_complete").await;
    // A presigned upload is no tus resource.
    let presigned = app.create_upload(&key, 10).await;
    let r = tus(
        &app,
        &key,
        reqwest::Method::HEAD,
        &app.url(&format!(
            "/v1/tus/{}",
            presigned["upload_id"].as_str().unwrap()
        )),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_expired_upload_answers_410_and_the_sweeper_removes_its_spool_file() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let file = bytes(10_000);
    let url = create(&app, &key, file.len()).await;
    let id = upload_id(&url);
    patch(&app, &key, &url, 0, &file[..4_000], None).await;
    app.count(&format!(
        "WITH x AS (UPDATE uploads SET expires_at = now() - interval '1 second'
                     WHERE id = '{id}' RETURNING 1) SELECT count(*) AS n FROM x"
    ))
    .await;
    let r = patch(&app, &key, &url, 4_000, &file[4_000..], None).await;
    assert_error(r, StatusCode::GONE, "upload_gone").await;
    let r = tus(&app, &key, reqwest::Method::HEAD, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::GONE);

    app.start_sweeper(app.storage.clone(), woken_sweeper())
        .await;
    let status = wait_for_state(&app, &key, &id, "expired").await;
    assert_eq!(status["received_bytes"], 4_000);
    // The row is expired first, then its file is removed: give the sweeper that moment.
    wait_gone(&spool_file(&app, &id)).await;
    assert!(!spool_file(&app, &id).exists());
    assert!(
        app.storage
            .head(&format!("originals/{id}"))
            .await
            .unwrap()
            .is_none()
    );
}

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
async fn a_single_put_lands_whole_or_not_at_all_and_is_confirmed_by_the_sweeper() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let file = bytes(120_000);
    let digest = hex::encode(sha2::Sha256::digest(&file));
    let created: Value = app
        .post(
            &key,
            "/v1/uploads",
            &json!({"filename": "c.mp4", "content_type": "video/mp4", "size_bytes": file.len(),
                    "via": "vidq", "checksum": format!("sha256:{digest}")}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(created["via"], "vidq");
    assert_eq!(created["method"], "PUT");
    let url = created["upload_url"].as_str().unwrap().to_owned();
    let id = created["upload_id"].as_str().unwrap().to_owned();
    assert_eq!(url, app.url(&format!("/v1/uploads/{id}/content")));

    // Another size than declared: refused before a byte is read.
    let r = app
        .http
        .put(&url)
        .bearer_auth(&key)
        .body(file[..1000].to_vec())
        .send()
        .await
        .unwrap();
    assert_error(r, StatusCode::CONFLICT, "size_mismatch").await;
    // The right size with other bytes: the checksum refuses it, nothing kept.
    let mut corrupt = file.clone();
    corrupt[60_000] ^= 0xff;
    let r = app
        .http
        .put(&url)
        .bearer_auth(&key)
        .body(corrupt)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 460);
    let status = wait_for_state(&app, &key, &id, "receiving").await;
    assert_eq!(status["received_bytes"], 0);
    assert_eq!(std::fs::metadata(spool_file(&app, &id)).unwrap().len(), 0);

    // Its whole-file checksum can only be checked on the single PUT: tus is refused.
    let r = patch(
        &app,
        &key,
        &app.url(&format!("/v1/tus/{id}")),
        0,
        &file[..10],
        None,
    )
    .await;
    assert_error(r, StatusCode::CONFLICT, "wrong_upload_method").await;

    let r = app
        .http
        .put(&url)
        .bearer_auth(&key)
        .body(file.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["state"], "pending");
    assert_eq!(body["received_bytes"], 120_000);

    app.start_sweeper(app.storage.clone(), woken_sweeper())
        .await;
    let status = wait_for_state(&app, &key, &id, "confirmed").await;
    assert!(status["video_id"].is_string());
    assert_eq!(
        app.storage
            .get_bytes(&format!("originals/{id}"))
            .await
            .unwrap()
            .unwrap(),
        file
    );

    // The content route of a presigned contract says where its bytes go.
    let presigned = app.create_upload(&key, 10).await;
    let r = app
        .http
        .put(app.url(&format!(
            "/v1/uploads/{}/content",
            presigned["upload_id"].as_str().unwrap()
        )))
        .bearer_auth(&key)
        .body(vec![0u8; 10])
        .send()
        .await
        .unwrap();
    assert_error(r, StatusCode::CONFLICT, "presigned_upload").await;
    let status: Value = app
        .get(
            &key,
            &format!("/v1/uploads/{}", presigned["upload_id"].as_str().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["state"], "pending");
    assert_eq!(status["via"], "presigned");
    // Bad `via` and a checksum for a presigned contract are refused.
    let r = app
        .post(&key, "/v1/uploads", &json!({"filename": "c.mp4", "content_type": "video/mp4", "size_bytes": 5, "via": "carrier-pigeon"}))
        .await;
    assert_error(r, StatusCode::BAD_REQUEST, "bad_request").await;
    let r = app
        .post(&key, "/v1/uploads", &json!({"filename": "c.mp4", "content_type": "video/mp4", "size_bytes": 5, "checksum": format!("sha256:{digest}")}))
        .await;
    assert_error(r, StatusCode::BAD_REQUEST, "bad_request").await;
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
