//! Broadcasts vidq cannot encode are refused at once, by real processes and real encoders:
//! an audio-only RTMP publish (FFmpeg `-f flv`, whose metadata names audio only) and an
//! audio-only HLS PUT broadcast (its init segment has no video track). Each recording fails
//! within 5 s with `no_video_stream`, and no encode is ever tried.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::deployment::{Deployment, publish_url};

/// FFmpeg making `seconds` of tone only, in real time, to `output` in `format`'s options.
fn audio_only(seconds: u32) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("ffmpeg");
    command
        .args(["-nostdin", "-v", "error", "-re"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"])
        .args(["-t", &seconds.to_string(), "-c:a", "aac"])
        .kill_on_drop(true);
    command
}

/// Waits until `recording` is `failed`; how long that took from `since`.
async fn failed_within(d: &Deployment, key: &str, id: &str, since: Instant) -> (Duration, Value) {
    loop {
        let now: Value = d
            .get(key, &format!("/v1/live/{id}"))
            .await
            .json()
            .await
            .unwrap();
        if now["state"] == "failed" {
            return (since.elapsed(), now);
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "never failed: {now}\n{}",
            d.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn audio_only_broadcasts_fail_at_once_with_no_video_stream() {
    let mut d = Deployment::prepare().await;
    d.start_with_rtmp().await;
    let key = d.user("radio").await;

    // RTMP: refused at publish, from its metadata.
    let recording = d.live_recording(&key).await;
    let id = recording["id"].as_str().unwrap();
    let url = publish_url(&recording);
    let started = Instant::now();
    let mut push = audio_only(20).args(["-f", "flv", &url]).spawn().unwrap();
    let (took, failed) = failed_within(&d, &key, id, started).await;
    assert!(took < Duration::from_secs(5), "failed after {took:?}");
    assert_eq!(failed["end_reason"], "no_video_stream", "{failed}");
    let pushed = tokio::time::timeout(Duration::from_secs(10), push.wait())
        .await
        .expect("the publisher is cut off, not left streaming")
        .unwrap();
    assert!(!pushed.success(), "the publisher sees the refusal");

    // HLS PUT: refused at the init segment.
    let recording = d.live_recording(&key).await;
    let id = recording["id"].as_str().unwrap();
    let ingest = recording["ingest_url"].as_str().unwrap();
    let started = Instant::now();
    let _hls = audio_only(20)
        .args(["-f", "hls", "-hls_segment_type", "fmp4", "-hls_time", "2"])
        .args(["-method", "PUT", &format!("{ingest}index.m3u8")])
        .spawn()
        .unwrap();
    let (took, failed) = failed_within(&d, &key, id, started).await;
    assert!(took < Duration::from_secs(5), "failed after {took:?}");
    assert_eq!(failed["end_reason"], "no_video_stream", "{failed}");

    // Nothing was queued for either: no encode tried three times.
    assert_eq!(d.count("SELECT count(*) AS n FROM videos").await, 0);
    let log = std::fs::read_to_string(d.log("api")).unwrap();
    assert!(log.contains("no_video_stream"), "the API says why:\n{log}");
}
