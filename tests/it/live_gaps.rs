//! A recording with a gap ends: segments 0, 1, 2 and 5 and then a final playlist naming
//! 0-9999 (the black-box probe's shape), against real `vidq` processes and FFmpeg's own files.
//! The live playlist lists every segment that arrived, marks the gap, and ends; an empty
//! file is refused; the recording's spool directory is gone once it is final.

use std::time::Duration;

use reqwest::StatusCode;

use crate::support::deployment::{API_NODE, Deployment};

#[tokio::test]
async fn a_recording_with_a_gap_ends_and_its_playlist_says_so() {
    let mut d = Deployment::prepare().await;
    let s3 = d.s3.endpoint();
    d.start(&s3).await;
    let key = d.user("broadcaster").await;
    let made = d.live_recording(&key).await;
    let id = made["id"].as_str().unwrap().to_owned();
    let ingest = made["ingest_url"].as_str().unwrap().to_owned();
    let playback = made["playback_url"].as_str().unwrap().to_owned();

    // An encoder's files, made here: 12 s cut into six 2 s fMP4 segments.
    let dir = tempfile::tempdir().unwrap();
    let encoded = crate::support::deployment::hls_encoder(12, false)
        .arg(dir.path().join("index.m3u8"))
        .status()
        .await
        .unwrap();
    assert!(encoded.success());
    let put = |name: &str, body: Vec<u8>| d.http.put(format!("{ingest}{name}")).body(body).send();
    for name in [
        "init.mp4",
        "index0.m4s",
        "index1.m4s",
        "index2.m4s",
        "index5.m4s",
    ] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        assert_eq!(
            put(name, bytes).await.unwrap().status(),
            StatusCode::CREATED,
            "{name}"
        );
    }
    // A 0-byte segment is refused, not stored.
    let empty = put("index3.m4s", Vec::new()).await.unwrap();
    assert_eq!(empty.status(), StatusCode::BAD_REQUEST);
    // The final playlist names segments 0 to 9999.
    let mut playlist = String::from(
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:0\n\
         #EXT-X-PLAYLIST-TYPE:EVENT\n#EXT-X-MAP:URI=\"init.mp4\"\n",
    );
    for n in 0..10_000 {
        playlist.push_str(&format!("#EXTINF:2.000000,\nindex{n}.m4s\n"));
    }
    playlist.push_str("#EXT-X-ENDLIST\n");
    let r = put("index.m3u8", playlist.into_bytes()).await.unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);

    d.wait_for(
        &format!("SELECT count(*) AS n FROM recordings WHERE id = '{id}' AND state = 'ready'"),
        1,
        Duration::from_secs(120),
    )
    .await;
    let text = d
        .http
        .get(&playback)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text.matches("#EXTINF").count(), 4, "{text}");
    assert_eq!(text.matches("#EXT-X-DISCONTINUITY").count(), 1, "{text}");
    assert!(
        text.ends_with("#EXT-X-ENDLIST\n"),
        "a watching player stops polling: {text}"
    );
    // A player reads it to its end: the four segments that arrived, 8 s.
    let seconds = crate::support::playback::played_seconds(&playback).await;
    assert!((seconds - 8.0).abs() < 0.5, "{seconds} s");
    // The final recording's spool directory is gone.
    let spool = d.node_dir(API_NODE).join("spool/live").join(&id);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while spool.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} stays",
            spool.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        d.count(&format!(
            "SELECT count(*) AS n FROM recording_files WHERE recording_id = '{id}' AND sequence = 3"
        ))
        .await,
        0,
        "the empty segment left no row"
    );
    d.ends_clean().await;
}
