//! Whole broadcasts in real time (`-re`): a 60-second broadcast with 4 s segments,
//! read live by FFmpeg's own HLS reader while it is pushed and then played as a VOD; and a
//! broadcast whose ingesting API process is killed with SIGKILL and restarted midway.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::TestApp;
use crate::support::clips;
use crate::support::live::{api_command, playable, read_live};
use crate::support::live_rig::LiveRig;
use crate::support::playback::played_seconds;
use crate::support::process::{answering, free_port};

/// FFmpeg pushing `clip` in real time as fMP4 HLS with 4 s segments to `ingest`, the way
/// the README tells an encoder to (a keyframe every 2 s, so every segment is 4 s). IO
/// errors (the API going away) are ignored: the encoder goes on with the next files.
fn pusher(clip: &std::path::Path, ingest: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("ffmpeg");
    command
        .args(["-nostdin", "-v", "error", "-re", "-i"])
        .arg(clip)
        .args(["-c:v", "libx264", "-preset", "ultrafast", "-g", "50"])
        .args(["-c:a", "aac", "-f", "hls", "-hls_segment_type", "fmp4"])
        .args(["-hls_time", "4", "-ignore_io_errors", "1", "-method", "PUT"])
        .arg(format!("{ingest}index.m3u8"))
        .kill_on_drop(true);
    command
}

async fn finished(child: tokio::process::Child) {
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the push ends")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The segment objects S3 holds for a recording.
async fn segment_objects(app: &TestApp, id: &str) -> Vec<String> {
    let mut keys: Vec<String> = app
        .storage
        .list_with_sizes(&format!("live/{id}/"))
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .filter(|k| k.ends_with(".m4s"))
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn a_60_second_broadcast_is_read_live_and_lands_15_segments_that_play_whole_as_a_vod() {
    let rig = LiveRig::start(&[]).await;
    let clip = clips::video(60, 320, 240);
    let push = pusher(&clip, &rig.ingest)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    // A player joins while it is live (the first segment is playable) and reads from the
    // start until the playlist ends.
    playable(&rig.app, &rig.playback).await;
    assert_eq!(rig.status().await["state"], "live");
    let read = tempfile::tempdir().unwrap();
    let copy = read.path().join("read.mp4");
    let ((), ()) = tokio::join!(
        read_live(&rig.playback, &copy, Duration::from_secs(150)),
        finished(push)
    );
    let live_seconds = played_seconds(copy.to_str().unwrap()).await;
    assert!(
        (live_seconds - 60.0).abs() < 1.0,
        "the live reader got {live_seconds} s"
    );

    // 15 segment rows uploaded = 15 segment objects, and the VOD and its MP4 play 60 s.
    let video = rig.ready_video().await;
    assert_eq!(
        rig.count(
            "SELECT count(*) AS n FROM recording_files
              WHERE recording_id = '{id}' AND axis = 'segment' AND state = 'uploaded'"
        )
        .await,
        15
    );
    assert_eq!(segment_objects(&rig.app, &rig.id).await.len(), 15);
    for url in [&video["playback"]["hls_url"], &video["playback"]["mp4_url"]] {
        let seconds = played_seconds(url.as_str().unwrap()).await;
        assert!((seconds - 60.0).abs() < 0.5, "{url}: {seconds} s");
    }
    rig.one_ready_event(video["id"].as_str().unwrap(), 15, 0)
        .await;
    rig.reconciled().await;
    rig.stop().await;
}

/// `vidq api` as a child process holding the ingest on fixed ports, spooling into the test
/// app's spool as the test node (whose sweeper the test starts later).
fn api_process(
    app: &TestApp,
    http: u16,
    ingest: u16,
    log: &std::path::Path,
) -> tokio::process::Child {
    api_command(app, http, ingest, log).spawn().unwrap()
}

#[tokio::test]
async fn a_sigkill_of_the_ingesting_api_mid_broadcast_loses_nothing_and_puts_nothing_twice() {
    let app = TestApp::spawn().await;
    let key = app.create_user("broadcaster").await;
    let (http, ingest_port) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("api.log");
    let base = format!("http://127.0.0.1:{http}");
    let mut api = api_process(&app, http, ingest_port, &log);
    answering(&app.http, &base, || {
        std::fs::read_to_string(&log).unwrap_or_default()
    })
    .await;
    let created = app
        .http
        .post(format!("{base}/v1/live"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let recording: Value = created.json().await.unwrap();
    let id = recording["id"].as_str().unwrap().to_owned();
    let ingest = recording["ingest_url"].as_str().unwrap().to_owned();
    assert!(ingest.contains(&format!(":{ingest_port}/")), "{ingest}");

    let clip = clips::video(20, 320, 240);
    let push = pusher(&clip, &ingest)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Two segments are on the node's disk (no sweeper runs yet): kill the process that
    // holds the ingest right after the second one, and start it again.
    let segments = format!(
        "SELECT count(*) AS n FROM recording_files WHERE recording_id = '{id}' AND axis = 'segment'"
    );
    crate::support::wait::wait_for_count(&app, &segments, 2, Duration::from_secs(30)).await;
    let pid = api.id().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    api.wait().await.unwrap();
    let on_disk = app
        .count(&format!(
            "SELECT count(*) AS n FROM recording_files WHERE recording_id = '{id}' AND state = 'pending'"
        ))
        .await;
    assert!(
        on_disk >= 3,
        "init and two segments wait on the spool ({on_disk})"
    );
    let log2 = dir.path().join("api-2.log");
    let restarting = Instant::now();
    let _api = api_process(&app, http, ingest_port, &log2);
    answering(&app.http, &base, || {
        std::fs::read_to_string(&log2).unwrap_or_default()
    })
    .await;
    let restart = restarting.elapsed();

    // The encoder's next files reach the new process; the recording goes on to its end.
    // FFmpeg sends the final playlist without waiting for the answer to its last segment's
    // PUT, so the endlist can be registered a few milliseconds before that segment's row:
    // the end is the endlist AND the segment it names last.
    finished(push).await;
    crate::support::wait::wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM recordings r
              WHERE r.id = '{id}' AND r.end_reason = 'endlist'
                AND EXISTS (SELECT 1 FROM recording_files f
                             WHERE f.recording_id = r.id AND f.axis = 'segment'
                               AND f.sequence = r.final_sequence)"
        ),
        1,
        Duration::from_secs(20),
    )
    .await;
    let arrived = app
        .count(&format!(
            "SELECT COALESCE(sum(1 << sequence), 0)::bigint AS n FROM recording_files
              WHERE recording_id = '{id}' AND axis = 'segment'"
        ))
        .await;
    // What was on disk before the kill, and the encoder's files after the restart, are all
    // there. FFmpeg does not resend a file whose PUT found nobody listening (it goes on with
    // the next), so a restart slower than a segment (a loaded machine) can cost the encoder
    // the segment it made meanwhile; in the usual case, well under one, nothing is missing.
    assert_eq!(
        arrived & 0b11,
        0b11,
        "the segments spooled before the kill ({arrived:b})"
    );
    assert_ne!(
        arrived & 0b10000,
        0,
        "the broadcast went on after the restart ({arrived:b})"
    );
    let whole = arrived == 0b11111;
    if restart < Duration::from_secs(2) {
        assert!(
            whole,
            "every segment arrived ({arrived:b}); restarted in {restart:?}"
        );
    }
    let kept = arrived.count_ones() as usize;
    // The node's sweeper lands what the killed process had spooled and the rest, each file
    // once under its one key; a worker makes the video.
    let store = vidq::bench::sweeper::FaultStore::new(app.storage.clone());
    let mut settings = crate::support::sweeper::woken_sweeper();
    settings.interval = Duration::from_millis(100);
    settings.live_grace = Duration::from_secs(1);
    app.start_sweeper(store.clone(), settings).await;
    let work = tempfile::tempdir().unwrap();
    let s3 = crate::support::s3_faults::S3Faults::start(&app.s3.as_ref().unwrap().endpoint()).await;
    let worker = crate::support::live_rig::repackager(&app, &s3, work.path()).await;
    crate::support::wait::wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM videos WHERE recording_id = '{id}' AND status = 'ready'"
        ),
        1,
        Duration::from_secs(60),
    )
    .await;
    worker.stop().await;
    let objects = segment_objects(&app, &id).await;
    assert_eq!(objects.len(), kept, "{objects:?}");
    let puts = store.puts();
    assert!(puts.values().all(|n| *n == 1), "{puts:?}");
    assert_eq!(
        puts.len(),
        kept + 1,
        "the init and the segments (the worker puts the original itself): {puts:?}"
    );
    let status = crate::support::live::recording_status(&app, &key, &id).await;
    let video = app.video(&key, &status["video_id"].as_str().unwrap()).await;
    if whole {
        let seconds = played_seconds(video["playback"]["hls_url"].as_str().unwrap()).await;
        assert!((seconds - 20.0).abs() < 0.5, "{seconds} s");
    }
    crate::support::reconcile::expect(
        &crate::support::reconcile::reconcile(&app, &["--grace-secs", "0"]).await,
        0,
    );
}
