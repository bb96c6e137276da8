//! The single `PUT .../content` of an upload through vidq: the declared size and the whole
//! file's checksum, all or nothing, confirmed by the sweeper; and what a presigned contract's
//! content route and a bad `via` or checksum are answered.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sha1::Digest;

use crate::support::app::{TestApp, assert_error};
use crate::support::sweeper::woken_sweeper;
use crate::support::tus::{bytes, patch, spool_file, wait_for_state};

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
