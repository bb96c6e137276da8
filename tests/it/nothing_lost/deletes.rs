//! A DELETE while S3 is down: the video's rows go at once, and its objects (original,
//! outputs) stay listed as owed (`doomed_objects`) in the same transaction. Once S3 answers
//! again, the sweeper process deletes them: no object is left, and the list is empty.
//! Real processes (`vidq api`, `vidq sweeper`, `vidq worker`) reach S3 through a switch
//! that refuses connections during the outage.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::put_presigned;
use crate::support::deployment::Deployment;
use crate::support::s3_switch::{Mode, Switch};

#[tokio::test]
async fn a_delete_during_an_s3_outage_leaves_no_object_once_s3_is_back() {
    let mut d = Deployment::prepare().await;
    let switch = Switch::start(d.s3.addr(), Mode::Up).await;
    d.start(&switch.endpoint()).await;
    let key = d.user("alice").await;
    let bytes = std::fs::read(crate::support::clips::small()).unwrap();
    let upload: Value = d
        .post(
            &key,
            "/v1/uploads",
            &serde_json::json!({"filename": "clip.mp4", "content_type": "video/mp4",
                "size_bytes": bytes.len()}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(
        put_presigned(&d.http, &upload, bytes)
            .await
            .status()
            .is_success()
    );
    let upload_id = upload["upload_id"].as_str().unwrap();
    let video: Value = d
        .post(
            &key,
            &format!("/v1/uploads/{upload_id}/confirm"),
            &serde_json::json!({}),
        )
        .await
        .json()
        .await
        .unwrap();
    let id = video["id"].as_str().unwrap().to_owned();
    d.wait_for(
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        1,
        Duration::from_secs(120),
    )
    .await;
    let objects = |d: &Deployment| {
        let (storage, id) = (d.storage.clone(), id.clone());
        let original = format!("originals/{upload_id}");
        async move {
            let mut keys = storage.list_prefix(&format!("videos/{id}/")).await.unwrap();
            keys.extend(storage.list_prefix(&original).await.unwrap());
            keys
        }
    };
    assert!(
        objects(&d).await.len() > 3,
        "the video has an original and outputs"
    );

    switch.set(Mode::Refused).await;
    let deleted = d
        .http
        .delete(format!("{}/v1/videos/{id}", d.api))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        d.get(&key, &format!("/v1/videos/{id}")).await.status(),
        StatusCode::NOT_FOUND,
        "the rows went at once"
    );
    assert!(
        !objects(&d).await.is_empty(),
        "S3 was down: the objects are still there"
    );
    let owed = d.count("SELECT count(*) AS n FROM doomed_objects").await;
    assert_eq!(
        owed, 2,
        "the original and the video's prefix are listed as owed"
    );
    // The sweeper tries during the outage too, and fails; a few seconds of it.
    tokio::time::sleep(Duration::from_secs(3)).await;

    switch.set(Mode::Up).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let left = objects(&d).await;
        let owed = d.count("SELECT count(*) AS n FROM doomed_objects").await;
        if left.is_empty() && owed == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "S3 is back but the sweeper left {left:?} ({owed} owed)\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    d.ends_clean().await;
}
