//! One namespace per deployment: two deployments (two databases, each with `vidq api`,
//! `vidq sweeper` and `vidq worker` processes) share one bucket on the prefixes `a/` and `b/`.
//! Each makes a READY video; each runs an orphan pass with a grace of 0 (`vidq reconcile
//! --fix`; a stray object planted in its own prefix shows the pass ran), its sweeper runs its
//! own every second, and neither touches the other's objects, nor another application's
//! object at the bucket's root. A third process of
//! deployment B pointed at `a/` refuses to start, naming both databases.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{TEST_BUCKET, put_presigned};
use crate::support::cli::{stderr, vidq};
use crate::support::deployment::Deployment;

/// The settings of a deployment on `prefix` whose sweeper's orphan pass runs every second.
fn prefixed(prefix: &str) -> Vec<(String, String)> {
    vec![
        ("VIDQ_S3_PREFIX".into(), prefix.into()),
        ("VIDQ_SWEEPER_ORPHAN_INTERVAL_SECS".into(), "1".into()),
    ]
}

/// A deployment of its own database on `prefix`, its processes reaching the bucket at `s3`.
async fn start_on(s3: &str, prefix: &str) -> Deployment {
    let mut d = Deployment::prepare().await;
    d.env = prefixed(prefix);
    d.start(s3).await;
    d
}

/// A small clip uploaded presigned and confirmed; waits for its video to be READY.
async fn ready_video(d: &Deployment, key: &str) -> Value {
    let bytes = std::fs::read(crate::support::clips::small()).unwrap();
    let made = d
        .post(
            key,
            "/v1/uploads",
            &serde_json::json!({"filename": "clip.mp4", "content_type": "video/mp4",
                "size_bytes": bytes.len()}),
        )
        .await;
    assert_eq!(made.status(), StatusCode::CREATED);
    let upload: Value = made.json().await.unwrap();
    assert!(
        upload["upload_url"]
            .as_str()
            .unwrap()
            .contains("/a/originals/")
            || upload["upload_url"]
                .as_str()
                .unwrap()
                .contains("/b/originals/"),
        "the presigned URL is under the prefix: {upload}"
    );
    assert!(
        put_presigned(&d.http, &upload, bytes)
            .await
            .status()
            .is_success()
    );
    let id = upload["upload_id"].as_str().unwrap();
    let confirmed = d
        .post(
            key,
            &format!("/v1/uploads/{id}/confirm"),
            &serde_json::json!({}),
        )
        .await;
    assert_eq!(confirmed.status(), StatusCode::ACCEPTED);
    let video: Value = confirmed.json().await.unwrap();
    d.wait_for(
        "SELECT count(*) AS n FROM videos WHERE status = 'ready'",
        1,
        Duration::from_secs(120),
    )
    .await;
    video
}

#[tokio::test]
async fn two_deployments_share_a_bucket_on_two_prefixes_and_not_on_one() {
    let mut a = Deployment::prepare().await;
    let s3 = a.s3.endpoint();
    a.env = prefixed("a/");
    a.start(&s3).await;
    let b = start_on(&s3, "b/").await;
    let bucket = &a.storage; // no prefix: the whole bucket
    // Another application's object, outside both prefixes, under a name vidq would own.
    bucket
        .put_bytes(
            "videos/someone-else.bin",
            b"theirs".to_vec(),
            "application/octet-stream",
        )
        .await
        .unwrap();

    let key_a = a.user("alice").await;
    let key_b = b.user("bob").await;
    let video_a = ready_video(&a, &key_a).await;
    let video_b = ready_video(&b, &key_b).await;

    // A stray object in each prefix: each deployment's orphan pass removes its own.
    for prefix in ["a/", "b/"] {
        bucket
            .put_bytes(
                &format!("{prefix}videos/0190b0a0-0000-7000-8000-000000000000/stray.bin"),
                b"stray".to_vec(),
                "application/octet-stream",
            )
            .await
            .unwrap();
    }
    // Each deployment's orphan pass with a grace of 0 (`vidq reconcile --fix`), beside its
    // sweepers' own passes.
    for (d, prefix) in [(&a, "a/"), (&b, "b/")] {
        let fixed = vidq(
            &["reconcile", "--fix", "--grace-secs", "0"],
            &[
                ("DATABASE_URL", d.db.url.as_str()),
                ("VIDQ_S3_ENDPOINT", s3.as_str()),
                ("VIDQ_S3_BUCKET", TEST_BUCKET),
                ("VIDQ_S3_PREFIX", prefix),
                ("VIDQ_S3_FORCE_PATH_STYLE", "true"),
                ("AWS_ACCESS_KEY_ID", "test-access"),
                ("AWS_SECRET_ACCESS_KEY", "test-secret"),
            ],
        )
        .await;
        assert_eq!(fixed.status.code(), Some(0), "{prefix}: {}", stderr(&fixed));
        let strays = bucket.list_prefix(prefix).await.unwrap();
        assert!(
            !strays.iter().any(|k| k.ends_with("stray.bin")),
            "{prefix}: its stray went: {strays:?}"
        );
    }
    // A few sweeper passes too, then everything each deployment owns is there.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let keys = bucket.list_prefix("").await.unwrap();
    for (prefix, video) in [("a/", &video_a), ("b/", &video_b)] {
        let id = video["id"].as_str().unwrap();
        assert!(
            keys.iter()
                .any(|k| k.starts_with(&format!("{prefix}videos/{id}/"))
                    && k.ends_with("index.m3u8")),
            "{prefix}: the video's outputs are there: {keys:?}"
        );
        assert!(
            keys.iter()
                .any(|k| k.starts_with(&format!("{prefix}originals/"))),
            "{prefix}: the original is there: {keys:?}"
        );
        assert!(
            keys.contains(&format!("{prefix}.vidq-deployment")),
            "{prefix}: its marker"
        );
    }
    assert!(
        keys.contains(&"videos/someone-else.bin".to_owned()),
        "another application's object is untouched"
    );
    assert!(
        keys.iter()
            .all(|k| k.starts_with("a/") || k.starts_with("b/") || k == "videos/someone-else.bin"),
        "vidq wrote nothing outside its prefixes: {keys:?}"
    );
    // Each still plays: its playback URL (a presigned GET under its prefix) answers.
    for (d, key, video) in [(&a, &key_a, &video_a), (&b, &key_b, &video_b)] {
        let now: Value = d
            .get(
                key,
                &format!("/v1/videos/{}", video["id"].as_str().unwrap()),
            )
            .await
            .json()
            .await
            .unwrap();
        let mp4 = now["playback"]["mp4_url"]
            .as_str()
            .expect("a READY video's MP4 URL");
        assert!(
            d.http.get(mp4).send().await.unwrap().status().is_success(),
            "{now}"
        );
    }

    // Deployment B's process pointed at A's prefix refuses to start and names both.
    let output = b
        .command_logged("api", "api-intruder", &s3, "intruder")
        .env("VIDQ_S3_PREFIX", "a/")
        .env(
            "VIDQ_HTTP_ADDR",
            format!("127.0.0.1:{}", crate::support::process::free_port()),
        )
        .env(
            "VIDQ_INGEST_ADDR",
            format!("127.0.0.1:{}", crate::support::process::free_port()),
        )
        .spawn()
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert!(!output.success(), "the intruder exits with an error");
    let log = std::fs::read_to_string(b.log("intruder")).unwrap();
    let (db_a, db_b) = (db_name(&a.db.url), db_name(&b.db.url));
    assert!(
        log.contains(&db_a) && log.contains(&db_b) && log.contains("a/.vidq-deployment"),
        "the refusal names both databases and the marker:\n{log}"
    );
}

fn db_name(url: &str) -> String {
    url.rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_owned()
}
