//! Split-and-stitch through the real queue and the real FFmpeg: a long upload becomes chunk
//! and audio parts that any worker claims, the last part wakes the stitch exactly once, and
//! the stitched video is READY with one `video.ready`, its intermediates gone. `quality`
//! compares stitched outputs with a single-pass encode of the same sources; `processes` runs
//! the parts on worker processes (two at once, one SIGKILLed mid-chunk).

mod processes;
mod quality;
mod sources;
mod whole_video;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use vidq::adapters::ffmpeg::MediaConfig;
use vidq::domain::ids::VideoId;
use vidq::domain::split::SplitSettings;
use vidq::pipeline::Pipeline;

use crate::support::app::TestApp;
use crate::support::clips::{self, SplitSource};
use crate::support::pipeline::upload_clip;
use crate::support::queue::{Worker, fast_settings, video_id};
use crate::support::wait::wait_for_count;

/// What the split tests configure: sources over 10 s are split into 8 s chunks of 4 s
/// segments, with a ladder of two renditions (each chunk encodes both from one decode).
pub fn split_media() -> MediaConfig {
    MediaConfig {
        ladder: vec![240, 120],
        segment_seconds: 4,
        threads: 1,
        split: SplitSettings {
            min_source_secs: 10,
            chunk_secs: 8,
            segment_secs: 4,
        },
        ..MediaConfig::default()
    }
}

/// Uploads `clip` as alice's and runs an in-process worker with `slots` slots on it until the
/// video is READY; returns the app, alice's key and the video.
pub async fn ready_split(clip: &Path, slots: u32) -> (TestApp, String, VideoId) {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let id = video_id(&upload_clip(&app, &key, clip).await);
    let work = tempfile::tempdir().unwrap();
    let body = Arc::new(Pipeline {
        storage: app.storage.clone(),
        db: app.pool.clone(),
        media: split_media(),
        work_root: work.path().to_owned(),
        waits: Default::default(),
    });
    let settings = vidq::queue::runner::WorkerSettings {
        slots,
        ..fast_settings("split-test")
    };
    let worker = Worker::start(&app.db.url, body, settings).await;
    wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status IN ('ready', 'failed')"
        ),
        1,
        Duration::from_secs(180),
    )
    .await;
    worker.stop().await;
    (app, key, id)
}

/// The live outputs of a READY video, downloaded: the MP4, and each rendition of the ladder
/// as one fragmented MP4 (its init and segments joined, as a player reads them).
pub struct Outputs {
    /// `video.mp4`.
    pub mp4: PathBuf,
    /// `hls/v{n}/` joined, rendition order.
    pub renditions: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

pub async fn download_outputs(app: &TestApp, id: VideoId, renditions: usize) -> Outputs {
    let dir = tempfile::tempdir().unwrap();
    let prefix = {
        #[derive(diesel::QueryableByName)]
        struct Live {
            #[diesel(sql_type = diesel::sql_types::Integer)]
            live_run: i32,
            #[diesel(sql_type = diesel::sql_types::Integer)]
            live_attempt: i32,
        }
        use diesel_async::RunQueryDsl;
        let mut conn = app.pool.get().await.unwrap();
        let live: Live = diesel::sql_query(format!(
            "SELECT live_run, live_attempt FROM videos WHERE id = '{id}' AND status = 'ready'"
        ))
        .get_result(&mut conn)
        .await
        .unwrap();
        vidq::domain::keys::attempt_prefix(id, live.live_run, live.live_attempt)
    };
    let mp4 = dir.path().join("video.mp4");
    let bytes = app
        .storage
        .get_bytes(&format!("{prefix}video.mp4"))
        .await
        .unwrap()
        .unwrap();
    std::fs::write(&mp4, bytes).unwrap();
    let mut files = Vec::new();
    for n in 0..renditions {
        let hls = format!("{prefix}hls/v{n}/");
        let mut keys = app.storage.list_prefix(&hls).await.unwrap();
        keys.retain(|k| k.ends_with(".m4s"));
        keys.sort();
        let mut joined = app
            .storage
            .get_bytes(&format!("{hls}init.mp4"))
            .await
            .unwrap()
            .unwrap();
        for key in keys {
            joined.extend(app.storage.get_bytes(&key).await.unwrap().unwrap());
        }
        let path = dir.path().join(format!("v{n}.mp4"));
        std::fs::write(&path, joined).unwrap();
        files.push(path);
    }
    Outputs {
        mp4,
        renditions: files,
        _dir: dir,
    }
}

#[tokio::test]
async fn a_long_upload_is_encoded_as_parts_and_stitched_ready_once() {
    let clip = clips::split_source(SplitSource::BFrameHeavy);
    let (app, key, id) = ready_split(&clip, 2).await;
    let video = app.video(&key, &id).await;
    assert_eq!(video["status"], "ready", "{video}");

    // 20 s in 8 s chunks: three chunks and the audio, each a completed job of the video; the
    // video's own job planned them (logged as `planned`) and then stitched them.
    let parts = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE video_id = '{id}' AND parent_id IS NOT NULL AND status = 'COMPLETED'"
    );
    assert_eq!(app.count(&parts).await, 4);
    let kinds = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE video_id = '{id}'
          AND ((kind = 'chunk' AND part IN (0, 1, 2)) OR (kind = 'audio' AND part = 3)
               OR (kind = 'stitch' AND parent_id IS NULL AND status = 'COMPLETED'))"
    );
    assert_eq!(app.count(&kinds).await, 5);
    let planned = format!(
        "SELECT count(*) AS n FROM job_attempt_log l JOIN video_encoding_jobs j ON j.id = l.job_id
          WHERE j.video_id = '{id}' AND l.outcome = 'planned'"
    );
    assert_eq!(app.count(&planned).await, 1);
    // The video's own job numbered its attempts once (I6): planning was attempt 1 (logged
    // `planned`), the stitch attempt 2 (a READY is not logged as an attempt of its own).
    let numbered = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs j
          WHERE j.video_id = '{id}' AND j.parent_id IS NULL AND j.attempt_count = 2
            AND EXISTS (SELECT 1 FROM job_attempt_log l
                         WHERE l.job_id = j.id AND l.attempt = 1 AND l.outcome = 'planned')"
    );
    assert_eq!(app.count(&numbered).await, 1);
    let events = format!(
        "SELECT count(*) AS n FROM notification_outbox WHERE video_id = '{id}' AND event_type = 'video.ready'"
    );
    assert_eq!(app.count(&events).await, 1);

    // Every frame of the source, once, and audio as long as the video.
    let out = download_outputs(&app, id, 2).await;
    let source = quality::frame_count(&clip).await;
    assert_eq!(quality::frame_count(&out.mp4).await, source);
    for rendition in &out.renditions {
        assert_eq!(quality::frame_count(rendition).await, source);
    }
    // A player plays the ladder from the video's HLS URL, both renditions, all 20 s.
    let url = video["playback"]["hls_url"].as_str().unwrap();
    let played = crate::support::playback::played_seconds_by_stream(url).await;
    assert_eq!(played.len(), 2, "{played:?}");
    for seconds in played {
        assert!((seconds - 20.0).abs() <= 0.1, "played {seconds} s of 20 s");
    }

    // The intermediates are gone, objects and ledger rows alike.
    crate::support::wait::wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM video_artifacts WHERE video_id = '{id}' AND part IS NOT NULL"
        ),
        0,
        Duration::from_secs(30),
    )
    .await;
    let run = vidq::domain::keys::run_prefix(id, 1);
    let left: Vec<String> = app
        .storage
        .list_prefix(&run)
        .await
        .unwrap()
        .into_iter()
        .filter(|k| k[run.len()..].starts_with('p'))
        .collect();
    assert!(left.is_empty(), "parts left in the bucket: {left:?}");
}

#[tokio::test]
async fn a_short_upload_is_encoded_whole() {
    let (app, key, id) = ready_split(&clips::small(), 1).await;
    assert_eq!(app.video(&key, &id).await["status"], "ready");
    let jobs = format!("SELECT count(*) AS n FROM video_encoding_jobs WHERE video_id = '{id}'");
    assert_eq!(app.count(&jobs).await, 1, "6 s is not split");
}

#[tokio::test]
async fn a_one_hour_upload_is_ready_with_default_settings() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let clip = clips::one_hour();
    let id = video_id(&upload_clip(&app, &key, &clip).await);
    let work = tempfile::tempdir().unwrap();
    let body = Arc::new(Pipeline {
        storage: app.storage.clone(),
        db: app.pool.clone(),
        media: MediaConfig::default(),
        work_root: work.path().to_owned(),
        waits: Default::default(),
    });
    // The default attempt deadline too: the audio part encodes the whole hour's audio.
    let settings = vidq::queue::runner::WorkerSettings {
        slots: 2,
        deadline: Duration::from_secs(2100),
        ..fast_settings("enc-hour")
    };
    let worker = Worker::start(&app.db.url, body, settings).await;
    wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status IN ('ready', 'failed')"
        ),
        1,
        Duration::from_secs(600),
    )
    .await;
    worker.stop().await;
    let video = app.video(&key, &id).await;
    assert_eq!(video["status"], "ready", "{video}");
    assert!(
        (video["duration_ms"].as_i64().unwrap() - 3_600_000).abs() <= 1000,
        "{video}"
    );
    // 3600 s in 48 s chunks: 75 chunks and the audio.
    let parts = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE video_id = '{id}' AND parent_id IS NOT NULL AND status = 'COMPLETED'"
    );
    assert_eq!(app.count(&parts).await, 76);
    let out = download_outputs(&app, id, 0).await;
    assert_eq!(quality::frame_count(&out.mp4).await, 3600);
    let url = video["playback"]["hls_url"].as_str().unwrap();
    let played = crate::support::playback::played_seconds_by_stream(url).await;
    assert!(
        (played[0] - 3600.0).abs() <= 1.0,
        "played {played:?} s of an hour"
    );
}
