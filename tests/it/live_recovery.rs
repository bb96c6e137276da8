//! The six recovery scenarios of a live recording, each run 5 times (30 runs) with a
//! real FFmpeg pushing the broadcast, the real sweeper landing its files through a wrapper
//! that fails the PUTs of chosen keys, a real worker repackaging it into a video (its S3
//! behind a fault proxy), and each run ending with `vidq reconcile` finding the ledger and
//! the bucket in agreement: (1) the worker's PUT of the joined original fails, (2) a playback segment's PUT fails, (3) the init is not
//! confirmed, (4) the broadcast ends, (5) the cutoff excludes late segments, (6) the init
//! recovers and releases the segments that waited for it.

use reqwest::StatusCode;

use crate::support::app::assert_error;
use crate::support::live::{playlist_text, push, uploaded};
use crate::support::live_rig::{LiveRig, plays_whole};
use crate::support::playback::played_seconds;

/// Runs of each scenario.
const RUNS: usize = 5;

#[tokio::test]
async fn scenario_1_the_workers_put_of_the_original_fails_and_a_later_attempt_lands_it() {
    for run in 0..RUNS {
        let rig = LiveRig::start(&[]).await;
        rig.worker_s3.fail_puts_ending("/original.mp4");
        push(&rig.ingest).await;
        // An attempt whose original could not be stored ends without READY and gives the job
        // back (attempts left).
        rig.wait(
            "SELECT count(*) AS n FROM job_attempts a JOIN video_encoding_jobs j ON j.id = a.job_id
               JOIN videos v ON v.id = j.video_id
              WHERE v.recording_id = '{id}' AND a.outcome = 'retry' AND a.error_code = 'storage_error'",
            1,
        )
        .await;
        assert!(rig.worker_s3.puts_failed() >= 1, "run {run}");
        assert_eq!(
            rig.count(
                "SELECT count(*) AS n FROM videos WHERE recording_id = '{id}' AND status = 'ready'"
            )
            .await,
            0,
            "run {run}: nothing is READY while the original is not in S3"
        );
        rig.worker_s3.heal();
        let video = rig.ready_video().await;
        assert_eq!(video["source"], "live");
        let video_id = video["id"].as_str().unwrap();
        // The original is the live attempt's output: in the ledger with the size S3 holds,
        // under that attempt's prefix; the failed attempt's prefix is swept.
        let (run_no, attempt) = (
            rig.count(&format!("SELECT run::bigint AS n FROM video_encoding_jobs WHERE video_id = '{video_id}'")).await,
            rig.count(&format!("SELECT attempt_count::bigint AS n FROM video_encoding_jobs WHERE video_id = '{video_id}'")).await,
        );
        assert!(attempt >= 2, "run {run}: READY on attempt {attempt}");
        let key = format!("videos/{video_id}/r{run_no}/a{attempt}/original.mp4");
        let original = rig
            .app
            .storage
            .head(&key)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("run {run}: {key} is not in S3"));
        assert_eq!(
            rig.count(&format!(
                "SELECT count(*) AS n FROM video_artifacts WHERE object_key = '{key}'
                  AND axis = 'original' AND state = 'uploaded' AND size_bytes = {}",
                original.size
            ))
            .await,
            1,
            "run {run}: the original's CAS on the size S3 holds"
        );
        let first = rig
            .app
            .storage
            .list_with_sizes(&format!("videos/{video_id}/r{run_no}/a1/"))
            .await
            .unwrap();
        assert!(first.is_empty(), "run {run}: attempt 1 keeps {first:?}");
        // Nothing of the recording went through a spool for the original.
        assert_eq!(
            rig.count("SELECT count(*) AS n FROM recording_files WHERE recording_id = '{id}' AND axis = 'original'")
                .await,
            0
        );
        rig.one_ready_event(video_id, 3, 0).await;
        plays_whole(&video).await;
        rig.reconciled().await;
        rig.stop().await;
    }
}

#[tokio::test]
async fn scenario_2_a_failed_segment_stops_the_playlist_before_it_until_the_sweeper_lands_it() {
    for run in 0..RUNS {
        let rig = LiveRig::start(&["seg_000001.m4s"]).await;
        push(&rig.ingest).await;
        uploaded(&rig.app, &rig.id, 3).await;
        rig.failed_twice("seg_000001.m4s").await;
        let text = playlist_text(&rig.app, &rig.playback).await;
        assert_eq!(
            text.matches("#EXTINF").count(),
            1,
            "run {run}: the playlist stops before segment 1: {text}"
        );
        assert!(!text.contains("ENDLIST"), "{text}");
        // A segment owed to S3 keeps the recording from becoming a video.
        assert_eq!(
            rig.count("SELECT count(*) AS n FROM videos WHERE recording_id = '{id}'")
                .await,
            0
        );
        rig.store.heal(&rig.key_of("seg_000001.m4s"));
        uploaded(&rig.app, &rig.id, 4).await;
        let text = playlist_text(&rig.app, &rig.playback).await;
        assert_eq!(text.matches("#EXTINF").count(), 3, "run {run}: {text}");
        rig.ends_ready(3, 0).await;
    }
}

#[tokio::test]
async fn scenario_3_an_unconfirmed_init_keeps_playback_closed_while_the_segments_upload() {
    for run in 0..RUNS {
        let rig = LiveRig::start(&["init.mp4"]).await;
        push(&rig.ingest).await;
        uploaded(&rig.app, &rig.id, 3).await;
        rig.failed_twice("init.mp4").await;
        // Past its cutoff the recording is final, and still nothing plays or is repackaged.
        rig.wait(
            "SELECT count(*) AS n FROM recordings WHERE id = '{id}' AND state = 'ended'",
            1,
        )
        .await;
        let status = rig.status().await;
        assert_eq!(status["init_uploaded"], false, "run {run}");
        assert_eq!(status["segments"]["uploaded"], 3, "run {run}: {status}");
        assert!(status["video_id"].is_null(), "{status}");
        let text = playlist_text(&rig.app, &rig.playback).await;
        assert!(
            !text.contains("#EXTINF") && !text.contains("#EXT-X-MAP"),
            "run {run}: {text}"
        );
        // Two more failed tries after the recording became final: the sweeper has run its
        // passes over it since, and still made no video.
        let tries = rig
            .count("SELECT tries::bigint AS n FROM recording_files WHERE recording_id = '{id}' AND axis = 'init'")
            .await;
        rig.wait(
            &format!(
                "SELECT count(*) AS n FROM recording_files
                  WHERE recording_id = '{{id}}' AND axis = 'init' AND tries >= {}",
                tries + 2
            ),
            1,
        )
        .await;
        assert_eq!(
            rig.count("SELECT count(*) AS n FROM videos WHERE recording_id = '{id}'")
                .await,
            0,
            "run {run}: no video without its init"
        );
        // Healed, it completes like any broadcast, with the ledger and the bucket agreeing.
        rig.store.heal(&rig.key_of("init.mp4"));
        rig.ends_ready(3, 0).await;
    }
}

#[tokio::test]
async fn scenario_4_the_broadcasts_end_repackages_it_into_one_ready_video() {
    for run in 0..RUNS {
        let rig = LiveRig::start(&[]).await;
        push(&rig.ingest).await;
        let video = rig.ready_video().await;
        let status = rig.status().await;
        assert_eq!(status["state"], "ready", "run {run}: {status}");
        assert_eq!(status["end_reason"], "endlist");
        assert_eq!(status["video_id"], video["id"]);
        assert_eq!(video["source"], "live");
        assert_eq!(video["recording_id"].as_str(), Some(rig.id.as_str()));
        assert!(video.get("upload_id").is_none(), "{video}");
        rig.one_ready_event(video["id"].as_str().unwrap(), 3, 0)
            .await;
        plays_whole(&video).await;
        // The live playlist is over too.
        let text = playlist_text(&rig.app, &rig.playback).await;
        assert!(text.ends_with("#EXT-X-ENDLIST\n"), "{text}");
        // Each file went to S3 once.
        for (key, puts) in rig.store.puts() {
            assert_eq!(puts, 1, "run {run}: {key}");
        }
        rig.reconciled().await;
        // Deleting the video deletes its recording and every object of both.
        let video_id = video["id"].as_str().unwrap();
        let deleted = rig
            .app
            .delete(&rig.key, &format!("/v1/videos/{video_id}"))
            .await;
        assert!(deleted.status().is_success(), "{}", deleted.status());
        assert_eq!(
            rig.app
                .get(&rig.key, &format!("/v1/live/{}", rig.id))
                .await
                .status(),
            StatusCode::NOT_FOUND
        );
        for prefix in [format!("live/{}/", rig.id), format!("videos/{video_id}/")] {
            let left = rig.app.storage.list_with_sizes(&prefix).await.unwrap();
            assert!(left.is_empty(), "run {run}: {prefix} keeps {left:?}");
        }
        rig.stop().await;
    }
}

#[tokio::test]
async fn scenario_5_segments_after_the_cutoff_are_excluded_and_never_put() {
    for run in 0..RUNS {
        let rig = LiveRig::start(&[]).await;
        push(&rig.ingest).await;
        rig.wait(
            "SELECT count(*) AS n FROM recordings WHERE id = '{id}' AND final_sequence = 2",
            1,
        )
        .await;
        let put = |name: &str| {
            rig.app
                .http
                .put(format!("{}{name}", rig.ingest))
                .body(vec![7u8; 64])
                .send()
        };
        // In the grace period, a number past the final playlist's last segment.
        assert_error(
            put("index5.m4s").await.unwrap(),
            StatusCode::CONFLICT,
            "excluded",
        )
        .await;
        rig.wait(
            "SELECT count(*) AS n FROM recordings WHERE id = '{id}' AND state IN ('ended', 'ready')",
            1,
        )
        .await;
        // Past the cutoff, any new segment.
        assert_error(
            put("index3.m4s").await.unwrap(),
            StatusCode::CONFLICT,
            "excluded",
        )
        .await;
        let video = rig.ready_video().await;
        let status = rig.status().await;
        assert_eq!(status["segments"]["excluded"], 2, "run {run}: {status}");
        assert_eq!(status["segments"]["uploaded"], 3);
        for late in ["seg_000003.m4s", "seg_000005.m4s"] {
            assert!(
                !rig.store.puts().contains_key(&rig.key_of(late)),
                "run {run}: {late} was PUT"
            );
            assert!(
                rig.app
                    .storage
                    .head(&rig.key_of(late))
                    .await
                    .unwrap()
                    .is_none()
            );
        }
        rig.one_ready_event(video["id"].as_str().unwrap(), 3, 2)
            .await;
        plays_whole(&video).await;
        rig.reconciled().await;
        rig.stop().await;
    }
}

#[tokio::test]
async fn scenario_6_the_init_recovers_and_releases_every_segment_that_waited_for_it() {
    for run in 0..RUNS {
        let rig = LiveRig::start(&["init.mp4"]).await;
        push(&rig.ingest).await;
        uploaded(&rig.app, &rig.id, 3).await;
        rig.failed_twice("init.mp4").await;
        let closed = playlist_text(&rig.app, &rig.playback).await;
        assert!(!closed.contains("#EXTINF"), "run {run}: {closed}");
        rig.store.heal(&rig.key_of("init.mp4"));
        uploaded(&rig.app, &rig.id, 4).await;
        // The first playlist after the init lands lists all three at once.
        let open = playlist_text(&rig.app, &rig.playback).await;
        assert_eq!(open.matches("#EXTINF").count(), 3, "run {run}: {open}");
        assert!(open.contains("#EXT-X-MAP:URI="), "{open}");
        let seconds = played_seconds(&rig.playback).await;
        assert!((seconds - 6.0).abs() < 0.5, "run {run}: {seconds} s");
        rig.ends_ready(3, 0).await;
    }
}

#[tokio::test]
async fn deleting_the_broadcaster_deletes_the_recording_its_video_and_their_objects() {
    let rig = LiveRig::start(&[]).await;
    push(&rig.ingest).await;
    let video = rig.ready_video().await;
    let video_id = video["id"].as_str().unwrap().to_owned();
    let deleted = vidq::app::users::delete_user(&rig.app.ctx, "broadcaster")
        .await
        .unwrap();
    assert_eq!(deleted.videos, 1);
    assert!(deleted.objects >= 5, "{deleted:?}");
    for table in [
        "recordings",
        "recording_files",
        "videos",
        "video_encoding_jobs",
    ] {
        assert_eq!(
            rig.count(&format!("SELECT count(*) AS n FROM {table}"))
                .await,
            0,
            "{table}"
        );
    }
    for prefix in [format!("live/{}/", rig.id), format!("videos/{video_id}/")] {
        let left = rig.app.storage.list_with_sizes(&prefix).await.unwrap();
        assert!(left.is_empty(), "{prefix} keeps {left:?}");
    }
    rig.stop().await;
}

#[tokio::test]
async fn an_explicitly_ended_broadcast_becomes_a_video_and_its_playlist_stays_ended() {
    let rig = LiveRig::start(&[]).await;
    // An encoder's files, made locally, PUT by hand without the final ENDLIST playlist.
    let dir = tempfile::tempdir().unwrap();
    let made = crate::support::live::hls_encoder()
        .arg(dir.path().join("index.m3u8"))
        .status()
        .await
        .unwrap();
    assert!(made.success());
    let text = std::fs::read_to_string(dir.path().join("index.m3u8")).unwrap();
    for name in ["init.mp4", "index0.m4s", "index1.m4s", "index2.m4s"] {
        let r = rig
            .app
            .http
            .put(format!("{}{name}", rig.ingest))
            .body(std::fs::read(dir.path().join(name)).unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED, "{name}");
    }
    let live_playlist = text.replace("#EXT-X-ENDLIST\n", "");
    let r = rig
        .app
        .http
        .put(format!("{}index.m3u8", rig.ingest))
        .body(live_playlist)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let r = rig
        .app
        .post(
            &rig.key,
            &format!("/v1/live/{}/end", rig.id),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let video = rig.ready_video().await;
    let status = rig.status().await;
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["end_reason"], "ended_by_client");
    // Past its cutoff and made into a video, the live playlist is over for good.
    let text = playlist_text(&rig.app, &rig.playback).await;
    assert_eq!(text.matches("#EXTINF").count(), 3, "{text}");
    assert!(text.ends_with("#EXT-X-ENDLIST\n"), "{text}");
    rig.one_ready_event(video["id"].as_str().unwrap(), 3, 0)
        .await;
    rig.reconciled().await;
    rig.stop().await;
}
