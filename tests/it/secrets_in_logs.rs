//! No secret reaches a log: a run of real processes (API, sweeper, worker, relay) that uses
//! every kind of secret vidq hands out or holds, with vidq's own logging at DEBUG, and then
//! every role's log is searched for each of them.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::deployment::{Deployment, broadcast};
use crate::support::receiver::Receiver;

/// The value of query parameter `name` in `url`.
fn query_value(url: &str, name: &str) -> String {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {url}"))
        .1
        .into_owned()
}

#[tokio::test]
async fn no_secret_used_in_a_run_appears_in_any_roles_log() {
    let mut d = Deployment::prepare().await;
    let s3 = d.s3.endpoint();
    let loud = [
        ("RUST_LOG", "vidq=debug,info"),
        ("VIDQ_WEBHOOK_ALLOW_PRIVATE", "true"),
    ];
    d.start_with(&s3, &loud).await;
    let mut relay = d
        .command("relay", "relay-1", &s3)
        .envs(loud)
        .spawn()
        .unwrap();
    let receiver = Receiver::start();
    let key = d.user("alice").await;

    let hook: Value = d
        .post(&key, "/v1/webhooks", &json!({ "url": receiver.url }))
        .await
        .json()
        .await
        .unwrap();
    let webhook_secret = hook["secret"].as_str().unwrap().to_owned();

    // A presigned upload, confirmed, made READY, and played with its token.
    let bytes = std::fs::read(crate::support::clips::small()).unwrap();
    let contract: Value = d
        .post(
            &key,
            "/v1/uploads",
            &json!({"filename": "a.mp4", "content_type": "video/mp4", "size_bytes": bytes.len()}),
        )
        .await
        .json()
        .await
        .unwrap();
    let signature = query_value(contract["upload_url"].as_str().unwrap(), "X-Amz-Signature");
    let put = crate::support::app::put_presigned(&d.http, &contract, bytes).await;
    assert!(put.status().is_success());
    let id = contract["upload_id"].as_str().unwrap();
    let confirm = d
        .post(&key, &format!("/v1/uploads/{id}/confirm"), &json!({}))
        .await;
    assert_eq!(confirm.status(), StatusCode::ACCEPTED);
    let video: Value = confirm.json().await.unwrap();
    let video_id = video["id"].as_str().unwrap().to_owned();
    d.wait_for(
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{video_id}' AND status = 'ready'"),
        1,
        Duration::from_secs(120),
    )
    .await;
    let video: Value = d
        .get(&key, &format!("/v1/videos/{video_id}"))
        .await
        .json()
        .await
        .unwrap();
    let hls_url = video["playback"]["hls_url"].as_str().unwrap().to_owned();
    let playback_token = query_value(&hls_url, "token");
    assert_eq!(
        d.http.get(&hls_url).send().await.unwrap().status(),
        StatusCode::OK
    );

    // A live recording: an encoder pointed at the API's port by mistake first, then at
    // the ingest listener.
    let recording = d.live_recording(&key).await;
    let stream_key = recording["stream_key"].as_str().unwrap().to_owned();
    let misdirected = d
        .http
        .put(format!("{}/v1/live/ingest/{stream_key}/index.m3u8", d.api))
        .body("#EXTM3U\n")
        .send()
        .await
        .unwrap();
    assert_eq!(misdirected.status(), StatusCode::NOT_FOUND);
    broadcast(recording["ingest_url"].as_str().unwrap(), 4).await;
    let rec_id = recording["id"].as_str().unwrap();
    let live_playlist = recording["playback_url"].as_str().unwrap();
    let live_token = query_value(live_playlist, "token");
    assert_eq!(
        d.http.get(live_playlist).send().await.unwrap().status(),
        StatusCode::OK
    );
    d.recording_when_ready(&key, rec_id).await;
    // Every event reached the receiver (so the relay signed with the secret).
    receiver
        .wait_until(Duration::from_secs(60), |arrivals| {
            crate::support::receiver::delivered(arrivals).len() >= 4
        })
        .await;
    relay.start_kill().unwrap();
    relay.wait().await.unwrap();

    let logs = format!(
        "{}{}",
        d.logs(),
        std::fs::read_to_string(d.log("relay")).unwrap()
    );
    // The API's own access line for it (the ingest listener's lines for the broadcast
    // name the same path, but answer 2xx).
    assert!(
        logs.lines()
            .any(|line| line.contains("path=/v1/live/ingest/…/index.m3u8")
                && line.contains("status=404")),
        "the misdirected request was logged, its key hidden:\n{logs}"
    );
    for (what, secret) in [
        ("API key", key.as_str()),
        ("stream key", stream_key.as_str()),
        ("webhook secret", webhook_secret.as_str()),
        ("playback token", playback_token.as_str()),
        ("live playback token", live_token.as_str()),
        ("presigned URL signature", signature.as_str()),
        ("S3 secret key", "test-secret"),
    ] {
        assert!(!logs.contains(secret), "the {what} is in a log:\n{logs}");
    }
}
