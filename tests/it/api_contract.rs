//! The API's contract at its edges, as a careless client or an attacker meets it: caps on
//! the work one key may leave open, tus as its specification says (metadata echoed byte for
//! byte, the method override), answers that fit the route, and a PUT refused when it says
//! it is something else than its contract.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::app::{TestApp, TestAppOptions, assert_error};
use crate::support::tus::{bytes, create, metadata, offset_of, patch, tus};

async fn presigned(app: &TestApp, key: &str) -> reqwest::Response {
    app.post(
        key,
        "/v1/uploads",
        &json!({"filename": "a.mp4", "content_type": "video/mp4", "size_bytes": 1000}),
    )
    .await
}

async fn tus_create(app: &TestApp, key: &str) -> reqwest::Response {
    tus(app, key, Method::POST, &app.url("/v1/tus/"))
        .header("Upload-Length", "1000")
        .header("Upload-Metadata", metadata("a.mp4", "video/mp4"))
        .send()
        .await
        .unwrap()
}

/// The files of the spool's upload directory.
fn spooled(app: &TestApp) -> Vec<String> {
    let dir = app.spool.path().join(vidq::adapters::spool::UPLOADS_DIR);
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn one_key_may_hold_only_so_many_unfinished_uploads_and_open_recordings() {
    let app = TestApp::spawn_with(TestAppOptions {
        open_caps: (3, 2),
        ..Default::default()
    })
    .await;
    let (alice, bob) = (app.create_user("alice").await, app.create_user("bob").await);
    // Three open uploads of either kind fill alice's cap, and cost the spool nothing.
    let first: Value = presigned(&app, &alice).await.json().await.unwrap();
    assert_eq!(tus_create(&app, &alice).await.status(), StatusCode::CREATED);
    assert_eq!(tus_create(&app, &alice).await.status(), StatusCode::CREATED);
    assert!(
        spooled(&app).is_empty(),
        "no spool file before a byte arrives: {:?}",
        spooled(&app)
    );
    for refused in [
        presigned(&app, &alice).await,
        tus_create(&app, &alice).await,
    ] {
        let body = assert_error(
            refused,
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_open_uploads",
        )
        .await;
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains('3') && message.contains("VIDQ_MAX_OPEN_UPLOADS_PER_USER"),
            "{message}"
        );
    }
    // Another key is not held to alice's count.
    assert_eq!(presigned(&app, &bob).await.status(), StatusCode::CREATED);
    // An upload that becomes a video frees its place.
    let bytes = vec![0u8; 1000];
    let put = crate::support::app::put_presigned(&app.http, &first, bytes).await;
    assert!(put.status().is_success());
    let id = first["upload_id"].as_str().unwrap();
    let confirmed = app
        .post(&alice, &format!("/v1/uploads/{id}/confirm"), &json!({}))
        .await;
    assert_eq!(confirmed.status(), StatusCode::ACCEPTED);
    assert_eq!(presigned(&app, &alice).await.status(), StatusCode::CREATED);

    // Two open recordings fill alice's other cap.
    for _ in 0..2 {
        let made = app.post(&alice, "/v1/live", &json!({})).await;
        assert_eq!(made.status(), StatusCode::CREATED);
    }
    let body = assert_error(
        app.post(&alice, "/v1/live", &json!({})).await,
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_open_recordings",
    )
    .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("VIDQ_MAX_OPEN_RECORDINGS_PER_USER"),
        "{body}"
    );
    assert_eq!(
        app.post(&bob, "/v1/live", &json!({})).await.status(),
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn a_tus_upload_gets_its_spool_file_with_its_first_byte() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let url = create(&app, &key, 1000).await;
    let id = url.rsplit('/').next().unwrap().to_owned();
    assert!(!spooled(&app).contains(&id));
    assert_eq!(offset_of(&app, &key, &url).await, 0, "HEAD needs no file");
    let body = bytes(1000);
    let sent = patch(&app, &key, &url, 0, &body[..400], None).await;
    assert_eq!(sent.status(), StatusCode::NO_CONTENT);
    assert!(spooled(&app).contains(&id), "{:?}", spooled(&app));
    let sent = patch(&app, &key, &url, 400, &body[400..], None).await;
    assert_eq!(sent.status(), StatusCode::NO_CONTENT);
    assert_eq!(sent.headers()["upload-offset"], "1000");
}

#[tokio::test]
async fn tus_head_echoes_the_metadata_exactly_as_the_client_sent_it() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    // Extra keys, a key without a value, and a filetype in capitals: all kept as sent.
    let sent = "filename Y2xpcC5tcDQ=,filetype VklERU8vTVA0,project cmVsZWFzZS0z,draft";
    let made = tus(&app, &key, Method::POST, &app.url("/v1/tus/"))
        .header("Upload-Length", "10")
        .header("Upload-Metadata", sent)
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::CREATED);
    let url = made.headers()["location"].to_str().unwrap().to_owned();
    let head = tus(&app, &key, Method::HEAD, &url).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["upload-metadata"], sent);
}

#[tokio::test]
async fn a_post_with_a_method_override_is_a_patch_or_a_termination() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let url = create(&app, &key, 1000).await;
    let body = bytes(1000);
    let overridden = |method: &'static str| {
        tus(&app, &key, Method::POST, &url).header("X-HTTP-Method-Override", method)
    };
    let sent = overridden("PATCH")
        .header("Upload-Offset", "0")
        .header("Content-Type", "application/offset+octet-stream")
        .body(body[..600].to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::NO_CONTENT);
    assert_eq!(sent.headers()["upload-offset"], "600");
    assert_eq!(offset_of(&app, &key, &url).await, 600);
    // A POST that names no method, or another one, is refused and changes nothing.
    for refused in [
        tus(&app, &key, Method::POST, &url).send().await.unwrap(),
        overridden("PUT").send().await.unwrap(),
    ] {
        assert_error(refused, StatusCode::BAD_REQUEST, "bad_request").await;
    }
    assert_eq!(offset_of(&app, &key, &url).await, 600);
    let ended = overridden("DELETE").send().await.unwrap();
    assert_eq!(ended.status(), StatusCode::NO_CONTENT);
    let head = tus(&app, &key, Method::HEAD, &url).send().await.unwrap();
    assert!(
        matches!(head.status(), StatusCode::NOT_FOUND | StatusCode::GONE),
        "{}",
        head.status()
    );
}

/// tus-js-client with `overridePatchMethod`, behind a proxy that refuses `PATCH` (as some
/// corporate proxies do): every PATCH goes as a POST, and the upload completes.
#[tokio::test]
async fn tus_js_client_uploads_through_the_method_override() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let clip = crate::support::clips::small();
    let size = std::fs::metadata(&clip).unwrap().len();
    let proxy = crate::support::s3_faults::S3Faults::start(&app.base).await;
    proxy.refuse_method("PATCH");
    let endpoint = format!("{}/v1/tus/", proxy.endpoint());
    let out = tokio::process::Command::new("node")
        .arg(crate::support::clients::clients_dir().join("tus_upload.mjs"))
        .args(["--endpoint", &endpoint, "--token", &key])
        .arg("--file")
        .arg(&clip)
        .args(["--chunk-size", "65536", "--override-patch"])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["bytes"].as_u64().unwrap(), size);
    let id = done["upload_url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    let received = app
        .count(&format!(
            "SELECT received_bytes AS n FROM uploads WHERE id = '{id}'"
        ))
        .await;
    assert_eq!(received as u64, size);
}

/// A `"via": "vidq"` contract for 1,000 bytes of video/mp4; its `upload_url`.
async fn vidq_contract(app: &TestApp, key: &str) -> String {
    let made: Value = app
        .post(
            key,
            "/v1/uploads",
            &json!({"filename": "a.mp4", "content_type": "video/mp4", "size_bytes": 1000, "via": "vidq"}),
        )
        .await
        .json()
        .await
        .unwrap();
    made["upload_url"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_single_put_that_says_it_is_something_else_is_refused_with_415() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let url = vidq_contract(&app, &key).await;
    let refused = app
        .http
        .put(&url)
        .bearer_auth(&key)
        .header("Content-Type", "text/html")
        .body(bytes(1000))
        .send()
        .await
        .unwrap();
    let body = assert_error(
        refused,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("video/mp4"),
        "{body}"
    );
    // Nothing was kept; the contract's own type (with a parameter) is taken.
    let status: Value = app
        .get(
            &key,
            &format!("/v1/uploads/{}", url.split('/').nth_back(1).unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["received_bytes"], 0, "{status}");
    let taken = app
        .http
        .put(&url)
        .bearer_auth(&key)
        .header("Content-Type", "video/mp4; codecs=\"avc1.64001f\"")
        .body(bytes(1000))
        .send()
        .await
        .unwrap();
    assert_eq!(taken.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_single_put_cut_short_says_to_send_the_whole_file_again() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let url = vidq_contract(&app, &key).await;
    let parsed = url::Url::parse(&url).unwrap();
    let mut socket =
        tokio::net::TcpStream::connect((parsed.host_str().unwrap(), parsed.port().unwrap()))
            .await
            .unwrap();
    let head = format!(
        "PUT {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {key}\r\nContent-Length: 1000\r\n\r\n",
        parsed.path(),
        parsed.host_str().unwrap()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(&bytes(400)).await.unwrap();
    // The client's side ends with 600 bytes owed.
    socket.shutdown().await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), socket.read_to_string(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("body_interrupted"), "{answer}");
    assert!(answer.contains("PUT the whole file again"), "{answer}");
    assert!(
        !answer.contains("HEAD"),
        "no HEAD to ask on this route: {answer}"
    );
}

/// A playlist URL with `token` twice is malformed (`400`), on each playlist route, and the
/// document lists that answer for each.
#[tokio::test]
async fn a_playlist_url_with_two_tokens_is_a_documented_400() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let recording: Value = app
        .post(&key, "/v1/live", &json!({}))
        .await
        .json()
        .await
        .unwrap();
    let id = recording["id"].as_str().unwrap();
    let video = "01a24604-ccc9-72b2-929e-718ad50681a6";
    let doc = crate::support::openapi::document(&app).await;
    for (path, documented) in [
        (
            format!("/v1/live/{id}/playlist.m3u8"),
            "/v1/live/{id}/playlist.m3u8",
        ),
        (
            format!("/v1/videos/{video}/hls.m3u8"),
            "/v1/videos/{video_id}/hls.m3u8",
        ),
        (
            format!("/v1/videos/{video}/hls/v0.m3u8"),
            "/v1/videos/{video_id}/hls/{rendition}.m3u8",
        ),
    ] {
        let answer = app
            .http
            .get(app.url(&format!("{path}?token=a&token=b")))
            .send()
            .await
            .unwrap();
        assert_error(answer, StatusCode::BAD_REQUEST, "bad_request").await;
        assert!(
            !doc["paths"][documented]["get"]["responses"]["400"].is_null(),
            "{documented} lists its 400"
        );
    }
}
