//! vidq spread over machines as an operator runs it: `vidq api` and `vidq sweeper` on node
//! `api-1` sharing one spool, and a `vidq worker` on node `enc-1` that shares nothing with
//! them but PostgreSQL and S3 (no `VIDQ_SPOOL_DIR`, its own working directory). Each role is
//! its own process. S3 sits behind a proxy the test controls, so it can be down (answering
//! 503, never answering, or refusing connections) and come back with nothing restarted.
//! Every test ends with no `pending` row in the ledger and `vidq reconcile` exiting 0.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::deployment::{Deployment, WORKER_NODE, broadcast};
use crate::support::s3_faults::S3Faults;
use crate::support::s3_switch::{Mode, Switch};

/// The recording's video once READY, as its owner reads it.
async fn ready_video_of(d: &Deployment, key: &str, recording: &str) -> Value {
    let status = d.recording_when_ready(key, recording).await;
    let video = status["video_id"]
        .as_str()
        .expect("the recording names its video");
    d.get(key, &format!("/v1/videos/{video}"))
        .await
        .json()
        .await
        .unwrap()
}

/// One `video.ready` for `video`, and the video was made on the encoding node.
async fn made_once_on_the_encoding_node(d: &Deployment, video: &str) {
    assert_eq!(
        d.count(&format!(
            "SELECT count(*) AS n FROM notification_outbox
              WHERE video_id = '{video}' AND event_type = 'video.ready'"
        ))
        .await,
        1
    );
    assert_eq!(
        d.count(&format!(
            "SELECT count(*) AS n FROM video_encoding_jobs WHERE video_id = '{video}'
                AND status = 'COMPLETED' AND claimed_by = '{WORKER_NODE}'"
        ))
        .await,
        1,
        "the job was done by {WORKER_NODE}"
    );
}

/// A 12 s live recording through the API node becomes a READY video on the worker node,
/// which joins it from S3 and writes its original there itself.
async fn a_live_recording_becomes_a_video(d: &Deployment, key: &str, s3: Option<&S3Faults>) {
    let recording: Value = d
        .post(key, "/v1/live", &json!({}))
        .await
        .json()
        .await
        .unwrap();
    let id = recording["id"].as_str().unwrap().to_owned();
    let ingest = recording["ingest_url"].as_str().unwrap().to_owned();
    let pushing = tokio::spawn(async move { broadcast(&ingest, 12).await });
    if let Some(s3) = s3 {
        // S3 goes down mid-broadcast and stays down while the recording ends: the files
        // after that wait in the spool, `pending`, and no video is made meanwhile.
        d.wait_for(
            &format!(
                "SELECT LEAST(count(*), 1) AS n FROM recording_files
                  WHERE recording_id = '{id}' AND axis = 'segment' AND state = 'uploaded'"
            ),
            1,
            Duration::from_secs(30),
        )
        .await;
        s3.set_down(true);
        pushing.await.unwrap();
        d.wait_for(
            &format!("SELECT count(*) AS n FROM recordings WHERE id = '{id}' AND state = 'ended'"),
            1,
            Duration::from_secs(30),
        )
        .await;
        // A few sweeper rounds into the outage: S3 stays down a while (the scenario), and
        // nothing marks the moment a video that must not be made would have been.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            d.count(&format!(
                "SELECT count(*) AS n FROM recording_files WHERE recording_id = '{id}' AND state = 'pending'"
            ))
            .await
                > 0,
            "files wait for S3"
        );
        assert_eq!(
            d.count(&format!(
                "SELECT count(*) AS n FROM videos WHERE recording_id = '{id}' AND status = 'ready'"
            ))
            .await,
            0
        );
        s3.set_down(false);
    } else {
        pushing.await.unwrap();
    }
    let video = ready_video_of(d, key, &id).await;
    let video_id = video["id"].as_str().unwrap().to_owned();
    made_once_on_the_encoding_node(d, &video_id).await;
    // The original the worker joined is in S3 under its attempt, with its ledger row.
    assert_eq!(
        d.count(&format!(
            "SELECT count(*) AS n FROM video_artifacts WHERE video_id = '{video_id}'
                AND axis = 'original' AND state = 'uploaded'"
        ))
        .await,
        1
    );
    let seconds =
        crate::support::playback::played_seconds(video["playback"]["hls_url"].as_str().unwrap())
            .await;
    assert!((seconds - 12.0).abs() <= 0.5, "the video plays {seconds} s");
}

#[tokio::test]
async fn a_worker_on_another_host_makes_a_live_recording_into_a_video() {
    let mut d = Deployment::prepare().await;
    let s3 = d.s3.endpoint();
    d.start(&s3).await;
    let key = d.user("broadcaster").await;
    a_live_recording_becomes_a_video(&d, &key, None).await;
    // Nothing of the recording was written on the encoding node's behalf in the API's spool.
    let worker_log = std::fs::read_to_string(d.log("worker")).unwrap();
    assert!(!worker_log.contains("VIDQ_SPOOL"), "{worker_log}");
    d.ends_clean().await;
}

#[tokio::test]
async fn a_recording_that_ends_while_s3_is_down_becomes_a_video_when_s3_is_back() {
    let mut d = Deployment::prepare().await;
    let s3 = S3Faults::start(&d.s3.endpoint()).await;
    d.start(&s3.endpoint()).await;
    let key = d.user("broadcaster").await;
    a_live_recording_becomes_a_video(&d, &key, Some(&s3)).await;
    for child in &mut d.processes {
        assert!(
            child.try_wait().unwrap().is_none(),
            "every role ran through the outage"
        );
    }
    d.ends_clean().await;
}

/// A tus upload (tuspy) and a single PUT into the spool, a presigned confirm refused, while
/// S3 is `mode`; then S3 comes back and both become READY.
async fn cold_start_without_s3(mode: Mode) {
    let mut d = Deployment::prepare().await;
    let switch = Switch::start(d.s3.addr(), mode).await;
    d.start(&switch.endpoint()).await;
    let key = d.user("alice").await;

    let readyz = d
        .http
        .get(format!("{}/readyz", d.api))
        .send()
        .await
        .unwrap();
    assert_eq!(
        readyz.status(),
        StatusCode::OK,
        "{mode:?}: ready without S3"
    );
    let ready: Value = readyz.json().await.unwrap();
    assert_eq!(ready["database"], "ok", "{ready}");
    assert_eq!(ready["storage"], "unavailable", "{mode:?}: {ready}");
    // One WARN naming storage, once its first check has given up.
    let storage_warnings = || {
        let log = std::fs::read_to_string(d.log("api")).unwrap();
        let n = log
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("object storage does not answer"))
            .count();
        (n, log)
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while storage_warnings().0 == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // tus through a real client, into the spool.
    let clip = crate::support::clips::small();
    let tus = crate::support::clients::run_client(
        "python3",
        "tus_upload.py",
        &format!("{}/v1/tus/", d.api),
        &key,
        &clip,
    )
    .await;
    assert_eq!(tus["bytes"], std::fs::metadata(&clip).unwrap().len());
    // The single PUT, into the spool.
    let bytes = std::fs::read(&clip).unwrap();
    let contract: Value = d
        .post(
            &key,
            "/v1/uploads",
            &json!({"filename": "b.mp4", "content_type": "video/mp4",
                    "size_bytes": bytes.len(), "via": "vidq"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let put = d
        .http
        .put(contract["upload_url"].as_str().unwrap())
        .bearer_auth(&key)
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert!(
        put.status().is_success(),
        "{mode:?}: single PUT {}",
        put.status()
    );
    assert_eq!(
        d.count("SELECT count(*) AS n FROM uploads WHERE via = 'vidq' AND state = 'pending'")
            .await,
        2,
        "{mode:?}: both wait in the spool for S3"
    );
    // A presigned contract is made (signing needs no call); its confirm needs S3.
    let presigned: Value = d
        .post(
            &key,
            "/v1/uploads",
            &json!({"filename": "c.mp4", "content_type": "video/mp4", "size_bytes": bytes.len()}),
        )
        .await
        .json()
        .await
        .unwrap();
    let id = presigned["upload_id"].as_str().unwrap();
    let confirm = d
        .post(&key, &format!("/v1/uploads/{id}/confirm"), &json!({}))
        .await;
    crate::support::app::assert_error(
        confirm,
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_unavailable",
    )
    .await;
    // Status reads and the event feed need only the database.
    assert_eq!(d.get(&key, "/v1/events").await.status(), StatusCode::OK);

    let (warnings, log) = storage_warnings();
    assert_eq!(
        warnings, 1,
        "{mode:?}: one WARN naming storage, however long:\n{log}"
    );
    switch.set(Mode::Up).await;
    d.wait_for(
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        2,
        Duration::from_secs(120),
    )
    .await;
    // With S3 back, the presigned contract is filled and confirmed like any other.
    let put = crate::support::app::put_presigned(&d.http, &presigned, bytes).await;
    assert!(put.status().is_success(), "{}", put.status());
    let confirm = d
        .post(&key, &format!("/v1/uploads/{id}/confirm"), &json!({}))
        .await;
    assert_eq!(confirm.status(), StatusCode::ACCEPTED);
    d.wait_for(
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        3,
        Duration::from_secs(120),
    )
    .await;
    for child in &mut d.processes {
        assert!(child.try_wait().unwrap().is_none(), "nothing was restarted");
    }
    let ready: Value = d
        .http
        .get(format!("{}/readyz", d.api))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["storage"], "ok", "{ready}");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !std::fs::read_to_string(d.log("api"))
        .unwrap()
        .contains("object storage answers again")
    {
        assert!(
            Instant::now() < deadline,
            "{mode:?}: no word that storage is back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    d.ends_clean().await;
}

#[tokio::test]
async fn the_api_starts_and_ingests_while_s3_never_answers() {
    cold_start_without_s3(Mode::Silent).await;
}

#[tokio::test]
async fn the_api_starts_and_ingests_while_s3_refuses_connections() {
    cold_start_without_s3(Mode::Refused).await;
}
