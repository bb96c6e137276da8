//! A node whose media tools cannot run must not fail everyone's videos: its ffprobe answers
//! `-version` (so the worker starts) but fails on real work with a loader error, exit 127, as
//! a host with a missing shared library does. Its attempts count as the node's fault
//! (`tool_failed`, retried), it stops claiming after `VIDQ_WORKER_TOOL_FAILURES` of them in a
//! row with its last claim handed back, and says so on `/healthz` and in its node row (the
//! dashboard's node list); a good node makes every video READY.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::support::app::TestApp;
use crate::support::clips;
use crate::support::pipeline::upload_clip;
use crate::support::process::free_port;
use crate::support::wait::wait_for_count;
use crate::support::worker::{probe_until, worker_command};

/// An ffprobe that runs for `-version` only and otherwise fails as a missing library does.
fn broken_ffprobe(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("ffprobe");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         if [ \"$1\" = \"-version\" ]; then exec ffprobe -version; fi\n\
         echo 'ffprobe: error while loading shared libraries: libavdevice.so.59: cannot open shared object file: No such file or directory' >&2\n\
         exit 127\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_node_whose_tools_cannot_run_stops_claiming_and_every_video_is_made_ready_elsewhere() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _broken = worker_command(&app, "broken", &dir.path().join("broken"), "1")
        .env("VIDQ_FFPROBE", broken_ffprobe(dir.path()))
        .env("VIDQ_HEALTH_LISTEN", format!("127.0.0.1:{port}"))
        .spawn()
        .unwrap();
    probe_until(port, "/healthz", 200, Duration::from_secs(15)).await;

    // Ten uploads while only the broken node runs.
    let clip = clips::video(1, 320, 240);
    for _ in 0..10 {
        upload_clip(&app, &key, &clip).await;
    }
    // Three attempts in a row could not run their tools: the third claim goes back and the
    // node stops claiming, and says why.
    let health = probe_until(port, "/healthz", 503, Duration::from_secs(60)).await;
    assert!(
        health.contains("media tools fail on this node")
            && health.contains("error while loading shared libraries"),
        "{health}"
    );
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM nodes
          WHERE node_id = 'broken' AND detail->>'health' LIKE 'unhealthy: media tools fail%'",
        1,
        Duration::from_secs(30),
    )
    .await;

    // A good node makes every video READY; none is FAILED.
    let _good = worker_command(&app, "good", &dir.path().join("good"), "1")
        .spawn()
        .unwrap();
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        10,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        app.count("SELECT count(*) AS n FROM videos WHERE status = 'failed'")
            .await,
        0
    );
    let attempts = |sql: &'static str| app.count(sql);
    assert_eq!(
        attempts(
            "SELECT count(*) AS n FROM job_attempts
              WHERE node_id = 'broken' AND outcome = 'retry' AND error_code = 'tool_failed'"
        )
        .await,
        2,
        "the first two are recorded as the node's fault, retried"
    );
    assert_eq!(
        attempts(
            "SELECT count(*) AS n FROM job_attempts WHERE node_id = 'broken' AND outcome = 'released'"
        )
        .await,
        1,
        "the third is handed back with its attempt restored"
    );
    assert_eq!(
        attempts("SELECT count(*) AS n FROM job_attempts WHERE node_id = 'broken'").await,
        3,
        "and the node claimed nothing after it"
    );
    let metrics = probe_until(port, "/metrics", 200, Duration::from_secs(5)).await;
    assert!(metrics.contains("vidq_worker_tools_up 0\n"), "{metrics}");
}
