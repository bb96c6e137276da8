//! S3 over HTTPS, its certificate signed by a CA of the operator's own (`VIDQ_S3_CA_FILE`):
//! every role reaches it and a tus upload in the `s3` store becomes a READY video; a client
//! that does not trust the CA is refused; a CA file that holds no certificate stops a role at
//! start-up with a sentence that names the setting.

use std::time::Duration;

use crate::support::cli::{stderr, vidq};
use crate::support::clients::run_client_with;
use crate::support::deployment::Deployment;
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
