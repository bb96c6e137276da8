//! The edges of live ingest, against real `vidq` processes and FFmpeg: an API killed
//! mid-request leaves no incoming file once it is back; a stream numbered from 100 plays
//! live and after, and its playlist's target duration is the encoder's from the first listed
//! segment to the end; a recording nobody streams to expires and leaves the dashboard and
//! the open-recordings gauge.

use std::path::Path;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tokio::io::AsyncWriteExt;

use crate::support::deployment::{API_NODE, Deployment, broadcast, hls_encoder_cut};

/// Every file under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// The `.part` files under the spool's incoming directory.
fn incoming_parts(d: &Deployment) -> Vec<std::path::PathBuf> {
    files_under(&d.node_dir(API_NODE).join("spool/live/incoming"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "part"))
        .collect()
}

#[tokio::test]
async fn an_api_killed_mid_request_leaves_no_incoming_file_once_it_is_back() {
    let mut d = Deployment::started().await;
    let key = d.user("broadcaster").await;
    let made = d.live_recording(&key).await;
    let id = made["id"].as_str().unwrap().to_owned();
    let ingest = made["ingest_url"].as_str().unwrap().to_owned();

    // An encoder half-way through a segment's PUT: the headers and 64 KiB of 1 MiB.
    let url = reqwest::Url::parse(&format!("{ingest}index0.m4s")).unwrap();
    let mut socket = tokio::net::TcpStream::connect((
        url.host_str().unwrap(),
        url.port_or_known_default().unwrap(),
    ))
    .await
    .unwrap();
    let head = format!(
        "PUT {} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
        url.path(),
        url.host_str().unwrap(),
        1 << 20
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(&vec![7u8; 64 * 1024]).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while incoming_parts(&d).is_empty() {
        assert!(Instant::now() < deadline, "no incoming file appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The process dies with the request in flight: nothing of it can clean up.
    d.crash_and_restart_api().await;
    drop(socket);
    assert_eq!(
        incoming_parts(&d),
        Vec::<std::path::PathBuf>::new(),
        "the restarted API removed what the dead one left"
    );
    assert!(
        d.logs()
            .contains("removed the incoming files of API processes that stopped mid-request"),
        "{}",
        d.logs()
    );

    // A real encoder streams to the same recording through the restarted API.
    broadcast(&ingest, 4).await;
    let ready = d.recording_when_ready(&key, &id).await;
    assert_eq!(ready["state"], "ready", "{ready}");
    assert!(incoming_parts(&d).is_empty());
    d.ends_clean().await;
}

/// `#EXT-X-TARGETDURATION` of a playlist, and the URLs of the segments it lists.
fn read_playlist(text: &str) -> (Option<u32>, Vec<String>) {
    let target = text
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-TARGETDURATION:"))
        .and_then(|n| n.trim().parse().ok());
    let mut after_extinf = false;
    let mut segments = Vec::new();
    for line in text.lines() {
        if after_extinf && !line.starts_with('#') {
            segments.push(line.to_owned());
        }
        after_extinf = line.starts_with("#EXTINF:") || (after_extinf && line.starts_with('#'));
    }
    (target, segments)
}

#[tokio::test]
async fn a_stream_numbered_from_100_plays_live_and_keeps_the_encoders_target_duration() {
    // The encoder's own playlist, made here first with the same settings: 8 s cut at 1.2 s
    // keyframes with a 1 s segment time, which FFmpeg announces as a 1 s target (the longest
    // segment's, rounded) while its segments last 1.2 s.
    let local = tempfile::tempdir().unwrap();
    let encoder = |realtime| {
        let mut command = hls_encoder_cut(8, realtime, 30, 1);
        command.args(["-start_number", "100", "-hls_playlist_type", "event"]);
        command
    };
    let made_locally = encoder(false)
        .arg(local.path().join("index.m3u8"))
        .status()
        .await
        .unwrap();
    assert!(made_locally.success());
    let own = std::fs::read_to_string(local.path().join("index.m3u8")).unwrap();
    let (encoders_target, encoders_segments) = read_playlist(&own);
    let encoders_target = encoders_target.unwrap();
    assert!(own.contains("#EXT-X-MEDIA-SEQUENCE:100"), "{own}");
    assert!(encoders_segments[0].ends_with("index100.m4s"), "{own}");

    let d = Deployment::started().await;
    let key = d.user("broadcaster").await;
    let made = d.live_recording(&key).await;
    let id = made["id"].as_str().unwrap().to_owned();
    let ingest = made["ingest_url"].as_str().unwrap().to_owned();
    let playback = made["playback_url"].as_str().unwrap().to_owned();

    let mut streaming = encoder(true)
        .args(["-method", "PUT"])
        .arg(format!("{ingest}index.m3u8"))
        .spawn()
        .unwrap();
    // A player polls the live playlist while the encoder streams.
    let mut seen: Vec<(Option<u32>, usize)> = Vec::new();
    let ended = loop {
        let text = d.text(&playback).await;
        let (target, segments) = read_playlist(&text);
        seen.push((target, segments.len()));
        if let Some(status) = streaming.try_wait().unwrap() {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(ended.success());
    let listing: Vec<&(Option<u32>, usize)> = seen.iter().filter(|(_, n)| *n > 0).collect();
    assert!(
        listing.len() >= 3 && listing.first().unwrap().1 < listing.last().unwrap().1,
        "the stream from 100 is listed while it is live and grows: {seen:?}"
    );
    assert!(
        listing.iter().all(|(t, _)| *t == Some(encoders_target)),
        "every playlist that lists a segment says the encoder's {encoders_target} s: {seen:?}"
    );

    let ready = d.recording_when_ready(&key, &id).await;
    assert_eq!(ready["state"], "ready", "{ready}");
    let last = d.text(&playback).await;
    let (target, segments) = read_playlist(&last);
    assert_eq!(target, Some(encoders_target), "{last}");
    assert_eq!(segments.len(), encoders_segments.len(), "{last}");
    assert!(last.ends_with("#EXT-X-ENDLIST\n"), "{last}");
    assert!(!last.contains("DISCONTINUITY"), "100 on is one run: {last}");
    // A player reads it whole: 8 s.
    let played = crate::support::playback::played_seconds_by_stream(&playback).await;
    assert!(
        played.iter().all(|s| (s - 8.0).abs() < 0.5),
        "played {played:?} of 8 s"
    );
    d.ends_clean().await;
}

const OPERATOR: &str = "operator-token-for-the-live-edges";

/// The open-recordings gauge, as `/metrics` says it.
async fn open_gauge(d: &Deployment) -> f64 {
    let text = d.text(&format!("{}/metrics", d.api)).await;
    text.lines()
        .find_map(|l| l.strip_prefix("vidq_live_recordings_open "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no open-recordings gauge in:\n{text}"))
}

/// The operator dashboard's page, logged in with the operator token.
async fn dashboard(d: &Deployment) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = client
        .post(format!("{}/admin/login", d.api))
        .form(&[("token", OPERATOR)])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let cookie = login.headers()[reqwest::header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = client
        .get(format!("{}/admin", d.api))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    page.text().await.unwrap()
}

#[tokio::test]
async fn a_recording_nobody_streams_to_expires_and_leaves_the_dashboard_and_the_gauge() {
    let mut d = Deployment::prepare().await;
    let s3 = d.s3.endpoint();
    d.start_with(
        &s3,
        &[
            ("VIDQ_LIVE_WAITING_TTL_SECS", "8"),
            ("VIDQ_ADMIN_TOKEN", OPERATOR),
        ],
    )
    .await;
    let key = d.user("broadcaster").await;
    let silent = d.live_recording(&key).await;
    let silent_id = silent["id"].as_str().unwrap().to_owned();
    let streamed = d.live_recording(&key).await;
    let streamed_id = streamed["id"].as_str().unwrap().to_owned();
    let ingest = streamed["ingest_url"].as_str().unwrap().to_owned();
    let pushing = tokio::spawn(async move { broadcast(&ingest, 4).await });

    assert_eq!(open_gauge(&d).await, 2.0);
    assert!(dashboard(&d).await.contains(&silent_id));

    // The streamed one becomes a video; the silent one expires, then fails (nothing to play).
    pushing.await.unwrap();
    d.recording_when_ready(&key, &streamed_id).await;
    d.wait_for(
        &format!(
            "SELECT count(*) AS n FROM recordings WHERE id = '{silent_id}'
               AND state = 'failed' AND end_reason = 'expired'"
        ),
        1,
        Duration::from_secs(60),
    )
    .await;
    let shown: serde_json::Value = d
        .get(&key, &format!("/v1/live/{silent_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&shown["state"], &shown["end_reason"]),
        (&serde_json::json!("failed"), &serde_json::json!("expired")),
        "{shown}"
    );
    assert_eq!(open_gauge(&d).await, 0.0);
    let page = dashboard(&d).await;
    assert!(!page.contains(&silent_id) && !page.contains(&streamed_id));

    // Its ingest URL takes nothing more.
    let late = d
        .http
        .put(format!(
            "{}init.mp4",
            silent["ingest_url"].as_str().unwrap()
        ))
        .body(vec![1u8; 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(late.status(), StatusCode::CONFLICT);
    for id in [&silent_id, &streamed_id] {
        let dir = d.node_dir(API_NODE).join("spool/live").join(id);
        assert!(
            !dir.exists(),
            "a final recording keeps no spool directory: {dir:?}"
        );
    }
    assert!(d.logs().contains("live recording expired"), "{}", d.logs());
    d.ends_clean().await;
}
