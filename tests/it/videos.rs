//! `GET /v1/videos/{id}`, `GET /v1/videos`, `DELETE /v1/videos/{id}`.

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{TestApp, assert_error};

#[tokio::test]
async fn status_shows_a_queued_video_to_its_owner_only() {
    let app = TestApp::spawn().await;
    let alice = app.create_user("alice").await;
    let mallory = app.create_user("mallory").await;
    let video = app.uploaded_video(&alice).await;
    let id = video["id"].as_str().unwrap();

    let response = app.get(&alice, &format!("/v1/videos/{id}")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    for field in [
        "id",
        "upload_id",
        "status",
        "attempts",
        "duration_ms",
        "width",
        "height",
        "created_at",
        "ready_at",
        "playback",
        "error",
    ] {
        assert!(body.get(field).is_some(), "missing {field}: {body}");
    }
    assert_eq!(body["status"], "queued");
    assert_eq!(body["attempts"], 0);

    assert_error(
        app.get(&mallory, &format!("/v1/videos/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    let unknown = uuid::Uuid::now_v7();
    assert_error(
        app.get(&alice, &format!("/v1/videos/{unknown}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn a_ready_video_shows_playback_urls_and_a_failed_one_its_error() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let ready = app.uploaded_video(&key).await;
    let failed = app.uploaded_video(&key).await;
    let (ready_id, failed_id) = (
        ready["id"].as_str().unwrap(),
        failed["id"].as_str().unwrap(),
    );
    let prefix = format!("videos/{ready_id}/a1");
    app.storage
        .put_bytes(
            &format!("{prefix}/thumb.jpg"),
            b"jpeg".to_vec(),
            "image/jpeg",
        )
        .await
        .unwrap();
    app.count(&format!(
        "WITH r AS (UPDATE videos SET status = 'ready', ready_at = now(), live_attempt = 1,
                        hls_key = '{prefix}/hls/index.m3u8', mp4_key = '{prefix}/video.mp4',
                        thumbnail_key = '{prefix}/thumb.jpg', duration_ms = 10080, width = 1280, height = 720
                     WHERE id = '{ready_id}' RETURNING 1),
              f AS (UPDATE videos SET status = 'failed', error_code = 'invalid_media',
                        error_message = 'not a video', failed_at = now()
                     WHERE id = '{failed_id}' RETURNING 1)
         SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM f) AS n"
    ))
    .await;

    let ready: Value = app
        .get(&key, &format!("/v1/videos/{ready_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "ready");
    assert_eq!(ready["duration_ms"], 10080);
    let thumb = ready["playback"]["thumbnail_url"].as_str().unwrap();
    assert!(
        ready["playback"]["hls_url"]
            .as_str()
            .unwrap()
            .starts_with(&app.url(&format!("/v1/videos/{ready_id}/hls.m3u8?token=")))
    );
    let fetched = app.http.get(thumb).send().await.unwrap();
    assert_eq!(fetched.status(), StatusCode::OK, "presigned GET works");
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), b"jpeg");

    let failed: Value = app
        .get(&key, &format!("/v1/videos/{failed_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error"]["code"], "invalid_media");
    assert_eq!(failed["error"]["message"], "not a video");
    assert!(failed["playback"].is_null());
}

#[tokio::test]
async fn listing_is_newest_first_and_paginates_with_a_cursor() {
    let app = TestApp::spawn().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(
            app.uploaded_video(&alice).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    app.uploaded_video(&bob).await;
    ids.reverse();

    let mut seen = Vec::new();
    let mut path = "/v1/videos?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page: Value = app.get(&alice, &path).await.json().await.unwrap();
        pages += 1;
        seen.extend(
            page["videos"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["id"].as_str().unwrap().to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/videos?limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(
        seen, ids,
        "every video of the caller once, newest first, none of bob's"
    );

    let queued: Value = app
        .get(&alice, "/v1/videos?status=queued")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(queued["videos"].as_array().unwrap().len(), 5);
    let ready: Value = app
        .get(&alice, "/v1/videos?status=ready")
        .await
        .json()
        .await
        .unwrap();
    assert!(ready["videos"].as_array().unwrap().is_empty());
    assert!(ready["next_cursor"].is_null());
}

#[tokio::test]
async fn listing_rejects_bad_parameters() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    for query in [
        "limit=0",
        "limit=101",
        "limit=x",
        "status=done",
        "cursor=abc",
    ] {
        assert_error(
            app.get(&key, &format!("/v1/videos?{query}")).await,
            StatusCode::BAD_REQUEST,
            "bad_request",
        )
        .await;
    }
}

#[tokio::test]
async fn delete_removes_the_rows_and_every_object_of_the_video() {
    let app = TestApp::spawn().await;
    let alice = app.create_user("alice").await;
    let mallory = app.create_user("mallory").await;
    let video = app.uploaded_video(&alice).await;
    let other = app.uploaded_video(&alice).await;
    let (id, upload_id) = (
        video["id"].as_str().unwrap(),
        video["upload_id"].as_str().unwrap(),
    );
    for key in [
        format!("videos/{id}/a1/hls/init.mp4"),
        format!("videos/{id}/a2/video.mp4"),
    ] {
        app.storage
            .put_bytes(&key, b"out".to_vec(), "video/mp4")
            .await
            .unwrap();
    }

    assert_error(
        app.delete(&mallory, &format!("/v1/videos/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}'"
        ))
        .await,
        1
    );

    assert_eq!(
        app.delete(&alice, &format!("/v1/videos/{id}"))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}'"
        ))
        .await,
        0
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM video_encoding_jobs WHERE video_id = '{id}'"
        ))
        .await,
        0
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM uploads WHERE id = '{upload_id}'"
        ))
        .await,
        0
    );
    assert!(
        app.storage
            .list_prefix(&format!("videos/{id}/"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        app.storage
            .head(&format!("originals/{upload_id}"))
            .await
            .unwrap(),
        None
    );

    let other_original = format!("originals/{}", other["upload_id"].as_str().unwrap());
    assert!(
        app.storage.head(&other_original).await.unwrap().is_some(),
        "other videos are untouched"
    );
    assert_error(
        app.delete(&alice, &format!("/v1/videos/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_error(
        app.get(&alice, &format!("/v1/videos/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
}

/// Reads that arrive together share one statement (`app::status_reads`); each must still
/// be answered for its own caller: the owner sees their video, anyone else a 404, an
/// unknown key a 401, however the reads were grouped.
#[tokio::test]
async fn status_reads_that_arrive_together_each_answer_their_own_caller() {
    let app = TestApp::spawn().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let alices = app.uploaded_video(&alice).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let bobs = app.uploaded_video(&bob).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let nobodys = uuid::Uuid::now_v7().to_string();
    let batches_before = batch_sizes(&app).await;

    // (caller, video, expected status) in turn, 50 of each, all in flight at once.
    let cases = [
        (alice.as_str(), alices.as_str(), StatusCode::OK),
        (bob.as_str(), bobs.as_str(), StatusCode::OK),
        (alice.as_str(), bobs.as_str(), StatusCode::NOT_FOUND),
        (bob.as_str(), nobodys.as_str(), StatusCode::NOT_FOUND),
        (
            "vidq_nobody_holds_this_key",
            alices.as_str(),
            StatusCode::UNAUTHORIZED,
        ),
    ];
    let reads = (0..250).map(|i| {
        let (key, video, expected) = cases[i % cases.len()];
        let app = &app;
        async move {
            let response = app.get(key, &format!("/v1/videos/{video}")).await;
            let status = response.status();
            let body: Value = response.json().await.unwrap();
            (video, expected, status, body)
        }
    });
    for (video, expected, status, body) in futures_util::future::join_all(reads).await {
        assert_eq!(status, expected, "{video}: {body}");
        if expected == StatusCode::OK {
            assert_eq!(body["id"], video, "{body}");
        }
    }
    // Some statement answered more than one of them: the test exercised the batches.
    let (sum, count) = batch_sizes(&app).await;
    assert!(
        sum - batches_before.0 > count - batches_before.1,
        "no status read statement answered two reads: sum {sum}, count {count}"
    );
}

/// `vidq_status_read_batch_size`'s sum and count (reads answered, statements made).
async fn batch_sizes(app: &TestApp) -> (f64, f64) {
    let text = app.http.get(app.url("/metrics")).send().await.unwrap();
    let text = text.text().await.unwrap();
    let value = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        value("vidq_status_read_batch_size_sum "),
        value("vidq_status_read_batch_size_count "),
    )
}
