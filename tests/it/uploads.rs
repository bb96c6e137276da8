//! `POST /v1/uploads`: the upload contract and its presigned PUT.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::app::{TestApp, TestAppOptions, assert_error};

#[tokio::test]
async fn every_v1_route_needs_a_valid_key() {
    let app = TestApp::spawn().await;
    let no_key = app
        .http
        .post(app.url("/v1/uploads"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_error(no_key, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let wrong_key = app.get("vidq_0000", "/v1/videos").await;
    assert_error(wrong_key, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let basic = app
        .http
        .get(app.url("/v1/videos"))
        .header("Authorization", "Basic dXNlcjpwdw==")
        .send()
        .await
        .unwrap();
    assert_error(basic, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

#[tokio::test]
async fn creating_an_upload_returns_a_presigned_put_to_a_server_chosen_key() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let response = app
        .post(
            &key,
            "/v1/uploads",
            &json!({ "filename": "../../etc/passwd.mp4", "content_type": "video/mp4", "size_bytes": 1234 }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.unwrap();
    let upload_id = body["upload_id"].as_str().unwrap();
    let url = body["upload_url"].as_str().unwrap();
    assert_eq!(body["method"], "PUT");
    assert!(url.contains(&format!("/originals/{upload_id}?")), "{url}");
    assert!(
        !url.contains("passwd"),
        "the client's filename never reaches the key: {url}"
    );
    assert!(url.contains("X-Amz-Signature="), "{url}");
    assert_eq!(body["headers"]["content-type"], "video/mp4");
    let expires: chrono::DateTime<chrono::Utc> =
        body["expires_at"].as_str().unwrap().parse().unwrap();
    let ttl = expires - chrono::Utc::now();
    assert!(
        ttl > chrono::Duration::seconds(590) && ttl <= chrono::Duration::seconds(600),
        "{ttl}"
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM uploads WHERE id = '{upload_id}' AND state = 'pending' AND declared_size = 1234"
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn the_presigned_url_accepts_the_put_and_stores_the_bytes() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let bytes = vec![7u8; 4096];
    let upload = app.create_upload(&key, bytes.len()).await;
    let put = app.put_to(&upload, bytes.clone()).await;
    assert!(put.status().is_success(), "{}", put.text().await.unwrap());
    let stored = app
        .storage
        .get_bytes(&format!(
            "originals/{}",
            upload["upload_id"].as_str().unwrap()
        ))
        .await
        .unwrap();
    assert_eq!(stored, Some(bytes));
}

#[tokio::test]
async fn a_tampered_presigned_url_is_refused_by_s3() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let mut upload = app.create_upload(&key, 10).await;
    let url = upload["upload_url"]
        .as_str()
        .unwrap()
        .replace("originals/", "originals/x");
    upload["upload_url"] = json!(url);
    let put = app.put_to(&upload, vec![1; 10]).await;
    assert_eq!(put.status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn non_video_content_types_are_415() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    for content_type in [
        "text/plain",
        "application/vnd.apple.mpegurl",
        "image/png",
        "",
    ] {
        let response = app
            .post(
                &key,
                "/v1/uploads",
                &json!({ "filename": "a.mp4", "content_type": content_type, "size_bytes": 10 }),
            )
            .await;
        assert_error(
            response,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        )
        .await;
    }
}

#[tokio::test]
async fn sizes_over_the_limit_are_413_and_nothing_is_recorded() {
    let app = TestApp::spawn_with(TestAppOptions {
        max_upload_bytes: 1000,
        ..TestAppOptions::default()
    })
    .await;
    let key = app.create_user("alice").await;
    let response = app
        .post(
            &key,
            "/v1/uploads",
            &json!({ "filename": "a.mp4", "content_type": "video/mp4", "size_bytes": 1001 }),
        )
        .await;
    assert_error(response, StatusCode::PAYLOAD_TOO_LARGE, "too_large").await;
    assert_eq!(app.count("SELECT count(*) AS n FROM uploads").await, 0);
}

#[tokio::test]
async fn malformed_requests_are_400() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let not_json = app
        .http
        .post(app.url("/v1/uploads"))
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_error(not_json, StatusCode::BAD_REQUEST, "bad_request").await;
    let missing_field = app
        .post(&key, "/v1/uploads", &json!({ "filename": "a.mp4" }))
        .await;
    assert_error(missing_field, StatusCode::BAD_REQUEST, "bad_request").await;
    let zero = app
        .post(
            &key,
            "/v1/uploads",
            &json!({ "filename": "a.mp4", "content_type": "video/mp4", "size_bytes": 0 }),
        )
        .await;
    assert_error(zero, StatusCode::BAD_REQUEST, "bad_request").await;
    let bad_name = app
        .post(
            &key,
            "/v1/uploads",
            &json!({ "filename": "", "content_type": "video/mp4", "size_bytes": 5 }),
        )
        .await;
    assert_error(bad_name, StatusCode::BAD_REQUEST, "bad_request").await;
}
