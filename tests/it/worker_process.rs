//! Real `vidq worker` processes and the real pipeline under the faults the design is built
//! for: SIGKILL mid-encode, SIGTERM mid-encode, and a worker cut off from its database.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::Child;
use vidq::adapters::ffmpeg::MediaConfig;
use vidq::pipeline::Pipeline;
use vidq::queue::runner::WorkerSettings;

use crate::support::app::TestApp;
use crate::support::clips;
use crate::support::media::processes_mentioning;
use crate::support::pipeline::upload_clip;
use crate::support::queue::{Worker, video_id};
use crate::support::wait::wait_for_count;
use crate::support::worker::{probe_until, worker_command};

/// A clip whose single-threaded encode takes several seconds, so a test can act mid-encode.
fn long_clip() -> std::path::PathBuf {
    clips::video(20, 1280, 720)
}

fn spawn_worker(app: &TestApp, node: &str, work_dir: &Path, threads: &str) -> Child {
    worker_command(app, node, work_dir, threads)
        .spawn()
        .unwrap()
}

/// Waits until an FFmpeg encode (the tee output) runs with a command line under `dir`.
async fn wait_for_encode(dir: &Path) -> Vec<u32> {
    let marker = dir.to_string_lossy().into_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids: Vec<u32> = processes_mentioning(&marker)
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains("tee"))
                    .unwrap_or(false)
            })
            .collect();
        if !pids.is_empty() {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "no encode started under {marker}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether `pid` is a running process (not gone, not a zombie waiting to be reaped).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the parenthesised command name, which may itself hold spaces.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// A long clip confirmed by alice, and work directories `a` and `b` for two worker nodes.
struct Scene {
    app: TestApp,
    key: String,
    id: vidq::domain::ids::VideoId,
    dirs: tempfile::TempDir,
}

impl Scene {
    async fn new() -> Self {
        let app = TestApp::spawn().await;
        let key = app.create_user("alice").await;
        let video = upload_clip(&app, &key, &long_clip()).await;
        let dirs = tempfile::tempdir().unwrap();
        for node in ["a", "b"] {
            std::fs::create_dir_all(dirs.path().join(node)).unwrap();
        }
        Self {
            id: video_id(&video),
            app,
            key,
            dirs,
        }
    }
}

/// Starts `node-b`, waits until it made the video ready, stops it with SIGTERM; returns how
/// it exited.
async fn finish_on_node_b(
    app: &TestApp,
    id: vidq::domain::ids::VideoId,
    dir: &Path,
) -> std::process::ExitStatus {
    let mut b = spawn_worker(app, "node-b", dir, "0");
    wait_for_count(
        app,
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready'"),
        1,
        Duration::from_secs(90),
    )
    .await;
    signal(b.id().unwrap(), "TERM");
    tokio::time::timeout(Duration::from_secs(10), b.wait())
        .await
        .expect("node-b stops within 10 s")
        .unwrap()
}

#[tokio::test]
async fn a_sigkilled_worker_loses_its_job_to_another_after_the_lease_and_the_video_ends_ready() {
    let Scene { app, key, id, dirs } = Scene::new().await;
    let (dir_a, dir_b) = (dirs.path().join("a"), dirs.path().join("b"));

    let mut a = spawn_worker(&app, "node-a", &dir_a, "1");
    let encoders = wait_for_encode(&dir_a).await;
    a.start_kill().unwrap(); // SIGKILL: no shutdown hook runs
    a.wait().await.unwrap();
    // Its FFmpeg dies with it (parent-death signal) instead of encoding on as an orphan.
    let killed = Instant::now();
    while let Some(pid) = encoders.iter().find(|pid| running(**pid)) {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "FFmpeg {pid} still runs {:?} after its worker was killed",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PROCESSING' AND claimed_by = 'node-a'").await,
        1,
        "the dead node's claim stays until its lease runs out"
    );

    let b = finish_on_node_b(&app, id, &dir_b).await;
    assert!(b.success());

    let api = app.video(&key, &id).await;
    assert_eq!(
        (api["status"].as_str(), api["attempts"].as_i64()),
        (Some("ready"), Some(2))
    );
    assert!(api["playback"]["hls_url"].is_string());
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}' AND hls_key LIKE '%/r1/a2/hls/index.m3u8'"
        ))
        .await,
        1,
        "the live playlist is attempt 2's"
    );
    assert_eq!(app.count("SELECT count(*) AS n FROM job_attempts WHERE attempt = 1 AND node_id = 'node-a' AND outcome = 'lost'").await, 1);
    assert_eq!(app.count("SELECT count(*) AS n FROM job_attempts WHERE attempt = 2 AND node_id = 'node-b' AND outcome = 'completed'").await, 1);
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        1
    );
    assert!(
        app.storage
            .list_prefix(&format!("videos/{id}/r1/a1/"))
            .await
            .unwrap()
            .is_empty()
    );
    // The READY owed attempt 1's prefix; the worker deleted it and crossed it off.
    assert_eq!(
        app.count("SELECT count(*) AS n FROM doomed_objects").await,
        0
    );
    assert!(
        !app.storage
            .list_prefix(&format!("videos/{id}/r1/a2/hls/"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn sigterm_hands_the_job_back_at_once_with_its_attempt_restored() {
    let Scene { app, key, id, dirs } = Scene::new().await;
    let (dir_a, dir_b) = (dirs.path().join("a"), dirs.path().join("b"));

    let mut a = spawn_worker(&app, "node-a", &dir_a, "1");
    wait_for_encode(&dir_a).await;
    let running = app.video(&key, &id).await;
    assert_eq!(
        (running["status"].as_str(), running["attempts"].as_i64()),
        (Some("processing"), Some(1))
    );

    let sent = Instant::now();
    signal(a.id().unwrap(), "TERM");
    let status = tokio::time::timeout(Duration::from_secs(10), a.wait())
        .await
        .expect("exits promptly")
        .unwrap();
    assert!(status.success(), "a controlled stop exits 0");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PENDING' AND attempt_count = 0").await, 1);
    assert!(
        processes_mentioning(&dir_a.to_string_lossy()).is_empty(),
        "its FFmpeg was killed"
    );
    assert_eq!(
        std::fs::read_dir(&dir_a).unwrap().count(),
        0,
        "its scratch directory is gone"
    );

    finish_on_node_b(&app, id, &dir_b).await;
    let api = app.video(&key, &id).await;
    assert_eq!(
        api["attempts"], 1,
        "a controlled stop is not a failed attempt"
    );
    assert_eq!(app.count("SELECT count(*) AS n FROM job_attempts WHERE outcome = 'released' AND node_id = 'node-a'").await, 1);
}

#[tokio::test]
async fn a_worker_cut_off_from_its_database_kills_ffmpeg_and_drops_the_result() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = upload_clip(&app, &key, &long_clip()).await;
    let id = video_id(&video);
    let work = tempfile::tempdir().unwrap();
    let proxy = crate::support::proxy::Proxy::in_front_of(&app.db.url).await;
    let media = MediaConfig {
        threads: 1,
        ..MediaConfig::default()
    };
    let pool_via_proxy = vidq::db::connect(&proxy.url_for(&app.db.url), 2)
        .await
        .unwrap();
    let body = Arc::new(Pipeline {
        storage: app.storage.clone(),
        db: pool_via_proxy,
        media,
        work_root: work.path().to_owned(),
        waits: Default::default(),
    });
    let settings = WorkerSettings {
        node_id: "partitioned".into(),
        slots: 1,
        poll: Duration::from_millis(100),
        lease: Duration::from_secs(2),
        heartbeat: Some(Duration::from_millis(500)),
        deadline: Duration::from_secs(120),
        retry_delay: Duration::from_secs(5),
        listeners: vidq::queue::line::Listeners::HeadOfLine,
        tool_failures: 3,
        tool_recheck: Duration::from_secs(60),
    };
    let worker = Worker::start(&proxy.url_for(&app.db.url), body, settings).await;
    wait_for_encode(work.path()).await;

    proxy.cut();
    let cut_at = Instant::now();
    // The lease the database holds: it ends a whole lease after the last renewal that
    // committed.
    let ms = "(extract(epoch FROM {}) * 1000)::bigint";
    let lease_end = app
        .count(&format!(
            "SELECT {} AS n FROM video_encoding_jobs WHERE status = 'PROCESSING'",
            ms.replace("{}", "lease_until")
        ))
        .await;
    let renewed = lease_end - 2_000;
    let marker = work.path().to_string_lossy().into_owned();
    // The latest database time at which FFmpeg was seen still running.
    let mut alive_at = 0;
    loop {
        let now = app
            .count(&format!(
                "SELECT {} AS n",
                ms.replace("{}", "clock_timestamp()")
            ))
            .await;
        if processes_mentioning(&marker).is_empty() {
            break;
        }
        alive_at = now;
        assert!(
            cut_at.elapsed() < Duration::from_secs(10),
            "FFmpeg still running {:?} after the cut",
            cut_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The worker keeps its attempt while its lease may still hold: FFmpeg outlived the next
    // heartbeat after the last renewal (500 ms), which found the database gone. A worker that
    // gave up on the first failed heartbeat would have killed it by then.
    assert!(
        alive_at >= renewed + 500,
        "FFmpeg was last seen {} ms after the last renewal",
        alive_at - renewed
    );

    // Nothing of the lost attempt reached S3 or the ledger; the job waits to be reclaimed.
    assert!(
        app.storage
            .list_prefix(&format!("videos/{id}/"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_artifacts").await,
        0
    );
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM notification_outbox WHERE event_type <> 'video.accepted'"
        )
        .await,
        0
    );
    // Its lease runs out and nobody extends it. (The worker gives up a whole lease after its
    // last heartbeat was sent; the database stamped that heartbeat a moment later, so under
    // load the lease can outlive the kill by that moment.)
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PROCESSING' AND lease_until < statement_timestamp()",
        1,
        Duration::from_secs(5),
    )
    .await;
    worker.stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(40), worker.handle).await;
}

#[tokio::test]
async fn the_health_listener_reports_work_done_and_a_lost_database() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let work = tempfile::tempdir().unwrap();
    let proxy = crate::support::proxy::Proxy::in_front_of(&app.db.url).await;
    let port = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().port()
    };
    let mut worker = worker_command(&app, "probed", work.path(), "1")
        .env("DATABASE_URL", proxy.url_for(&app.db.url))
        .env("VIDQ_HEALTH_LISTEN", format!("127.0.0.1:{port}"))
        .spawn()
        .unwrap();

    let body = probe_until(port, "/healthz", 200, Duration::from_secs(15)).await;
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["slots"], 1);

    upload_clip(&app, &key, &clips::video(1, 320, 240)).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        1,
        Duration::from_secs(30),
    )
    .await;
    // The attempt is counted once the worker has finished with it, a moment after READY.
    let expected = [
        "vidq_worker_claims_total{result=\"job\"} 1\n",
        "vidq_worker_attempts_total{outcome=\"ready\"} 1\n",
        "vidq_worker_running 0\n",
        "vidq_worker_database_up 1\n",
        "# TYPE vidq_worker_claim_duration_seconds histogram\n",
        "vidq_worker_attempt_duration_seconds_count{kind=\"encode\",outcome=\"ready\"} 1\n",
        "vidq_time_to_ready_seconds_count 1\n",
        "vidq_worker_heartbeat_failures_total 0\n",
        "vidq_worker_claims_lost_total{at=\"heartbeat\"} 0\n",
    ];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let metrics = probe_until(port, "/metrics", 200, Duration::from_secs(1)).await;
        let missing: Vec<&str> = expected
            .iter()
            .copied()
            .filter(|line| !metrics.contains(line))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing:?} missing from:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Take the database away: the next poll fails and the probe says why.
    proxy.cut();
    let body = probe_until(port, "/healthz", 503, Duration::from_secs(15)).await;
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["status"], "unhealthy");
    assert!(
        health["reason"]
            .as_str()
            .unwrap()
            .starts_with("database unavailable"),
        "{health}"
    );
    signal(worker.id().unwrap(), "TERM");
    let _ = tokio::time::timeout(Duration::from_secs(20), worker.wait()).await;
}
