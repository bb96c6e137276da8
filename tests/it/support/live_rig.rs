//! One broadcast's world for the live recovery scenarios: the API (ingest), its node's
//! sweeper behind a fault wrapper, a worker that repackages, and a fresh recording.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use vidq::adapters::ffmpeg::MediaConfig;
use vidq::bench::sweeper::FaultStore;
use vidq::pipeline::Pipeline;

use crate::support::app::{TestApp, TestAppOptions};
use crate::support::live::create_recording;
use crate::support::playback::played_seconds;
use crate::support::queue::{Worker, fast_settings};
use crate::support::reconcile::{expect, reconcile};
use crate::support::s3_faults::S3Faults;
use crate::support::wait::wait_for_count;

/// One broadcast's world: the API (ingest), its node's sweeper behind a fault wrapper, a
/// worker that repackages, and a fresh recording.
pub struct LiveRig {
    pub app: TestApp,
    pub key: String,
    pub store: FaultStore,
    /// In front of the worker's S3.
    pub worker_s3: S3Faults,
    pub worker: Option<Worker>,
    pub id: String,
    pub ingest: String,
    pub playback: String,
    _work: tempfile::TempDir,
}

impl LiveRig {
    /// Everything running; PUTs of `failing` (names under the recording's `live/{id}/`)
    /// fail until healed.
    pub async fn start(failing: &[&str]) -> Self {
        let app = TestApp::spawn_with(TestAppOptions {
            live: vidq::config::LiveArgs {
                idle_secs: 30,
                grace_secs: 1,
                ..Default::default()
            },
            ..Default::default()
        })
        .await;
        let key = app.create_user("broadcaster").await;
        let recording = create_recording(&app, &key).await;
        let id = recording["id"].as_str().unwrap().to_owned();
        let store = FaultStore::new(app.storage.clone());
        for name in failing {
            store.fail_puts_of(&format!("live/{id}/{name}"));
        }
        let mut settings = crate::support::sweeper::woken_sweeper();
        // Failed rows are tried again at the next round: rounds come often here.
        settings.interval = Duration::from_millis(100);
        settings.backoff = vidq::domain::sweep::Backoff {
            base: Duration::from_millis(50),
            cap: Duration::from_millis(200),
        };
        settings.live_grace = Duration::from_secs(1);
        app.start_sweeper(store.clone(), settings).await;
        let work = tempfile::tempdir().unwrap();
        let worker_s3 = S3Faults::start(&app.s3.as_ref().unwrap().endpoint()).await;
        let worker = repackager(&app, &worker_s3, work.path()).await;
        Self {
            ingest: recording["ingest_url"].as_str().unwrap().to_owned(),
            playback: recording["playback_url"].as_str().unwrap().to_owned(),
            id,
            key,
            store,
            worker_s3,
            worker: Some(worker),
            app,
            _work: work,
        }
    }

    pub fn key_of(&self, name: &str) -> String {
        format!("live/{}/{name}", self.id)
    }

    pub async fn count(&self, sql: &str) -> i64 {
        self.app.count(&sql.replace("{id}", &self.id)).await
    }

    pub async fn wait(&self, sql: &str, want: i64) {
        wait_for_count(
            &self.app,
            &sql.replace("{id}", &self.id),
            want,
            Duration::from_secs(60),
        )
        .await;
    }

    pub async fn status(&self) -> Value {
        crate::support::live::recording_status(&self.app, &self.key, &self.id).await
    }

    /// Waits for the recording's video to be READY; returns it as the API shows it.
    pub async fn ready_video(&self) -> Value {
        self.wait(
            "SELECT count(*) AS n FROM videos WHERE recording_id = '{id}' AND status = 'ready'",
            1,
        )
        .await;
        let video = self.status().await["video_id"]
            .as_str()
            .expect("the recording shows its video")
            .to_owned();
        self.app.video(&self.key, &video).await
    }

    /// Waits until a file's PUTs have failed at least twice (its row backs off meanwhile).
    pub async fn failed_twice(&self, name: &str) {
        let key = self.key_of(name);
        self.wait(
            &format!(
                "SELECT count(*) AS n FROM recording_files
                  WHERE object_key = '{key}' AND state = 'pending' AND tries >= 2"
            ),
            1,
        )
        .await;
    }

    /// The video's events: exactly one `video.accepted` and one `video.ready`, which says
    /// it came from a live recording and how many segments it kept and excluded.
    pub async fn one_ready_event(&self, video: &str, kept: i64, excluded: i64) {
        let of = |kind: &str| {
            format!(
                "SELECT count(*) AS n FROM notification_outbox
                  WHERE video_id = '{video}' AND event_type = '{kind}'"
            )
        };
        assert_eq!(self.app.count(&of("video.accepted")).await, 1);
        assert_eq!(self.app.count(&of("video.ready")).await, 1);
        assert_eq!(self.app.count(&of("video.failed")).await, 0);
        let ready = self
            .app
            .count(&format!(
                "SELECT count(*) AS n FROM notification_outbox
                  WHERE video_id = '{video}' AND event_type = 'video.ready'
                    AND payload->'data'->>'source' = 'live'
                    AND (payload->'data'->'segments'->>'kept')::bigint = {kept}
                    AND (payload->'data'->'segments'->>'excluded')::bigint = {excluded}"
            ))
            .await;
        assert_eq!(
            ready, 1,
            "video.ready names the source and the segment counts"
        );
    }

    /// Every file of the recording is in S3 at its key with the ledger's size, nothing else
    /// is there, and the spool is empty: `vidq reconcile` exits 0.
    pub async fn reconciled(&self) {
        expect(&reconcile(&self.app, &["--grace-secs", "0"]).await, 0);
        let dir = self.app.spool.path().join("live").join(&self.id);
        let left = std::fs::read_dir(&dir).map_or(0, |d| d.count());
        assert_eq!(left, 0, "the spool still holds files of {}", self.id);
    }

    /// The end of every run: the video is READY with one `video.ready` (segments kept and
    /// excluded as given), its VOD outputs play the whole broadcast, `vidq reconcile` finds no
    /// difference; then the worker stops.
    pub async fn ends_ready(self, kept: i64, excluded: i64) {
        let video = self.ready_video().await;
        self.one_ready_event(video["id"].as_str().unwrap(), kept, excluded)
            .await;
        plays_whole(&video).await;
        self.reconciled().await;
        self.stop().await;
    }

    pub async fn stop(mut self) {
        if let Some(worker) = self.worker.take() {
            worker.stop().await;
        }
    }
}

/// A worker that shares nothing with the app but its database and bucket: it reads the
/// recording from S3 through `s3` and works in `work`.
pub async fn repackager(app: &TestApp, s3: &S3Faults, work: &std::path::Path) -> Worker {
    let body = Arc::new(Pipeline {
        storage: app.storage_at(&s3.endpoint()).await,
        db: app.pool.clone(),
        media: MediaConfig::default(),
        work_root: work.to_owned(),
        // S3 refusing the worker's PUTs (scenario 1) fails the attempt after 2 s rather
        // than after the default two minutes of an outage waited out.
        waits: vidq::pipeline::AttemptWaits {
            storage: std::time::Duration::from_secs(2),
            ..Default::default()
        },
    });
    Worker::start(&app.db.url, body, fast_settings("repackager")).await
}

/// The VOD outputs of a live video play the whole broadcast (6 s), HLS and MP4.
pub async fn plays_whole(video: &Value) {
    let playback = &video["playback"];
    for url in [&playback["hls_url"], &playback["mp4_url"]] {
        let seconds = played_seconds(url.as_str().unwrap()).await;
        assert!((seconds - 6.0).abs() < 0.5, "{url}: {seconds} s");
    }
}
