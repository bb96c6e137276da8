//! Live files through database restarts: a deployment of real processes on a private
//! PostgreSQL that the test restarts twice (a fast shutdown, 3 s down, started again: longer
//! than a segment, so files of both broadcasts arrive while it is away) while a 60-second RTMP
//! broadcast (FFmpeg publishing `-f flv`) and a 60-second HLS PUT broadcast (FFmpeg's `hls`
//! muxer, `-method PUT`) stream into it. Encoders never send a refused file again, so the
//! ingest listener waits out the restarts with each file in its spool: every segment
//! number arrives, none is counted lost, and each video is as long as its broadcast
//! within one segment.

use std::time::Duration;

use serde_json::Value;

use crate::support::db::TestDb;
use crate::support::deployment::{Deployment, hls_encoder, publish_url};

const SECONDS: u32 = 60;
const SEGMENT_SECS: f64 = 2.0;

#[tokio::test]
async fn two_database_restarts_during_two_broadcasts_lose_no_segment() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let pg = vidq::adapters::private_pg::PrivatePostgres::start(&dir.path().join("pg"))
        .await
        .expect("a private PostgreSQL (the server's binaries are installed with it)");
    let url = vidq::db::pool::with_database(&pg.url, "vidq_outage").unwrap();
    vidq::db::provision::create_database_if_missing(&url)
        .await
        .unwrap();
    let mut d = Deployment::prepare_on(TestDb { url }).await;
    d.start_with_rtmp().await;
    let key = d.user("broadcaster").await;
    let by_rtmp = d.live_recording(&key).await;
    let by_hls = d.live_recording(&key).await;

    let rtmp_url = publish_url(&by_rtmp);
    let rtmp = tokio::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-re"])
        .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"])
        .args(["-t", &SECONDS.to_string()])
        .args([
            "-c:v",
            "libx264",
            "-g",
            "50",
            "-keyint_min",
            "50",
            "-sc_threshold",
            "0",
        ])
        .args(["-preset", "ultrafast", "-pix_fmt", "yuv420p", "-c:a", "aac"])
        .args(["-f", "flv", &rtmp_url])
        .kill_on_drop(true)
        .output();
    let ingest = by_hls["ingest_url"].as_str().unwrap().to_owned();
    let hls = hls_encoder(SECONDS, true)
        .args(["-hls_playlist_type", "event", "-method", "PUT"])
        .arg(format!("{ingest}index.m3u8"))
        .output();
    let restarts = async {
        for at in [15, 20] {
            tokio::time::sleep(Duration::from_secs(at)).await;
            pg.restart_after(Duration::from_secs(3))
                .await
                .expect("the restart");
        }
    };
    let (rtmp, hls, ()) = tokio::join!(rtmp, hls, restarts);
    // The test's own connections died with the server; the processes' pools recover alone.
    d.pool = vidq::db::connect(&d.db.url, 4).await.unwrap();
    for out in [rtmp.unwrap(), hls.unwrap()] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The RTMP encoder has left; its recording ends now rather than after the idle time.
    let rtmp_id = by_rtmp["id"].as_str().unwrap();
    let ended = d
        .post(
            &key,
            &format!("/v1/live/{rtmp_id}/end"),
            &serde_json::json!({}),
        )
        .await;
    assert!(ended.status().is_success());

    for recording in [&by_rtmp, &by_hls] {
        let id = recording["id"].as_str().unwrap();
        let done = d.recording_when_ready(&key, id).await;
        assert_eq!(done["segments"]["lost"], 0, "{done}");
        let numbers = d
            .count(&format!(
                "SELECT count(DISTINCT sequence) AS n FROM recording_files
                  WHERE recording_id = '{id}' AND axis = 'segment'"
            ))
            .await;
        let highest = d
            .count(&format!(
                "SELECT max(sequence)::bigint AS n FROM recording_files
                  WHERE recording_id = '{id}' AND axis = 'segment'"
            ))
            .await;
        assert_eq!(
            numbers,
            highest + 1,
            "{id}: every segment number from 0 to {highest} is there"
        );
        let video: Value = d
            .get(
                &key,
                &format!("/v1/videos/{}", done["video_id"].as_str().unwrap()),
            )
            .await
            .json()
            .await
            .unwrap();
        let secs = video["duration_ms"].as_f64().unwrap() / 1000.0;
        assert!(
            (secs - f64::from(SECONDS)).abs() <= SEGMENT_SECS,
            "{id}: {secs} s of a {SECONDS} s broadcast"
        );
    }
    let log = d.logs();
    assert!(
        log.contains("the database answers again"),
        "the ingest listener waited for the database:\n{log}"
    );
    drop(d);
    pg.stop().await;
}
