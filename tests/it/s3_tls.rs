//! S3 over HTTPS, its certificate signed by a CA of the operator's own (`VIDQ_S3_CA_FILE`):
//! every role reaches it and a tus upload in the `s3` store becomes a READY video; roles
//! started while it refuses connections go on once it answers, and a player plays the
//! result; a client that does not trust the CA is refused; a CA file that holds
//! no certificate stops a role at start-up with a sentence that names the setting.

use std::time::Duration;

use crate::support::cli::{stderr, vidq};
use serde_json::Value;

use crate::support::clients::{run_client, run_client_with};
use crate::support::deployment::Deployment;
use crate::support::s3_switch::{Mode, Switch};
use crate::support::tus::upload_id;

#[tokio::test]
async fn every_role_reaches_an_https_s3_through_the_ca_file_and_a_tus_upload_becomes_a_video() {
    let mut d = Deployment::prepare_tls().await;
    let s3 = d.s3.endpoint();
    assert!(s3.starts_with("https://"), "{s3}");
    // The `s3` tus store: the API streams tail pieces, then the last part, over TLS.
    d.start_with(&s3, &[("VIDQ_TUS_STORE", "s3")]).await;
    let key = d.user("alice").await;
    let clip = crate::support::clips::video(4, 640, 360);
    let answer = run_client_with(
        "python3",
        "tus_upload.py",
        &format!("{}/v1/tus/", d.api),
        &key,
        &clip,
        (256 * 1024, 0, 0.5),
    )
    .await;
    let id = upload_id(answer["upload_url"].as_str().unwrap());
    d.wait_for(
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        1,
        Duration::from_secs(120),
    )
    .await;
    assert!(
        d.storage
            .get_bytes(&format!("originals/{id}"))
            .await
            .unwrap()
            == Some(std::fs::read(&clip).unwrap()),
        "S3 holds the file byte for byte"
    );
    assert_eq!(d.storage.list_multiparts("").await.unwrap(), vec![]);
    // The worker wrote the renditions over TLS too.
    assert!(
        d.count(
            "SELECT count(*) AS n FROM video_artifacts
              WHERE axis IN ('playlist', 'segment') AND state = 'uploaded'"
        )
        .await
            > 0,
        "{}",
        d.logs()
    );
}

#[tokio::test]
async fn roles_started_while_the_https_s3_refuses_connections_go_on_once_it_answers() {
    let mut d = Deployment::prepare_tls().await;
    // Nothing listens at the endpoint the roles are given until the switch is up; the TLS
    // connection then runs through it to the server, whose certificate names 127.0.0.1.
    let switch = Switch::start(d.s3.addr(), Mode::Refused).await;
    let s3 = switch.endpoint().replacen("http://", "https://", 1);
    d.start(&s3).await;
    let key = d.user("alice").await;
    let clip = crate::support::clips::small();
    let tus = run_client(
        "python3",
        "tus_upload.py",
        &format!("{}/v1/tus/", d.api),
        &key,
        &clip,
    )
    .await;
    assert_eq!(tus["bytes"], std::fs::metadata(&clip).unwrap().len());
    assert_eq!(
        d.count("SELECT count(*) AS n FROM uploads WHERE state = 'pending'")
            .await,
        1,
        "the upload waits in the spool for S3"
    );
    switch.set(Mode::Up).await;
    d.wait_for(
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        1,
        Duration::from_secs(120),
    )
    .await;
    let id = upload_id(tus["upload_url"].as_str().unwrap());
    let upload: Value = d
        .get(&key, &format!("/v1/uploads/{id}"))
        .await
        .json()
        .await
        .unwrap();
    let video: Value = d
        .get(
            &key,
            &format!("/v1/videos/{}", upload["video_id"].as_str().unwrap()),
        )
        .await
        .json()
        .await
        .unwrap();
    // A player on the playback URL: the playlist from the API, its segments presigned on
    // the HTTPS S3. FFmpeg does not check certificates by default, so this shows the video
    // plays over HTTPS; the certificate checks are the SDK's, above and below.
    let url = video["playback"]["hls_url"].as_str().unwrap();
    assert!(
        d.text(url).await.contains(&format!("{s3}/")),
        "segments are presigned on {s3}"
    );
    let seconds = crate::support::playback::played_seconds(url).await;
    assert!((seconds - 6.0).abs() <= 0.5, "the video plays {seconds} s");
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_ca_is_refused() {
    let d = Deployment::prepare_tls().await;
    // `d.storage` trusts the certificate and made the bucket; this one trusts only the
    // system's roots.
    let stranger = crate::support::app::storage_client(&d.s3.endpoint(), Default::default()).await;
    let refused = stranger
        .put_bytes("a", b"x".to_vec(), "text/plain")
        .await
        .expect_err("an unknown certificate is refused");
    let why = vidq::telemetry::error_chain(&refused);
    assert!(why.to_lowercase().contains("certificate"), "{why}");
    assert_eq!(
        d.storage.get_bytes("a").await.unwrap(),
        None,
        "nothing stored"
    );
}

#[tokio::test]
async fn a_ca_file_without_a_certificate_stops_a_role_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "this is no certificate\n").unwrap();
    let missing = dir.path().join("missing.pem");
    for (file, says) in [
        (&not_pem, "holds no PEM certificate"),
        (&missing, "cannot read"),
    ] {
        let out = vidq(
            &["api"],
            &[
                ("DATABASE_URL", "postgres://127.0.0.1/unused"),
                ("VIDQ_S3_BUCKET", "videos"),
                ("VIDQ_S3_CA_FILE", file.to_str().unwrap()),
            ],
        )
        .await;
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(
            text.contains("VIDQ_S3_CA_FILE") || text.contains("--s3-ca-file"),
            "{text}"
        );
        assert!(text.contains(says), "{text}");
    }
}
