//! The several-machines recipe of docs/operations.md ("An example: four hosts"), its shell
//! blocks taken from the Markdown and run as written, each host a directory and processes of
//! its own: the database and the bucket made first (`psql`, the AWS CLI), `vidq migrate`
//! and a key, then `api-1` (API and sweeper), `enc-1` and `enc-2` (workers) and a relay.
//! What a test run must change is changed and nothing else: the shared settings block is
//! replaced by this run's database, S3 (served in this process) and secrets; `/srv/vidq`
//! becomes each host's directory; listeners take free loopback ports instead of `0.0.0.0`.
//! The build-and-copy block is checked for the production build command but not run (a
//! release build takes minutes; the binary this test run built is on `PATH` as `vidq`).
//! Then a client uploads through the API node and the video must be encoded on one of the
//! two encoding nodes and announced to a webhook by the relay.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::clips;
use crate::support::process::{answers_within, free_port};
use crate::support::receiver::Receiver;
use crate::support::recipes::{Ran, count_at, run, sh_blocks};

const ACCESS_KEY: &str = "vidq-recipe";
const SECRET_KEY: &str = "vidq-recipe-secret";

/// `vidq` on `PATH`, as the recipe's copy would put it: the binary this test run built.
fn path_with_vidq(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_vidq"), bin.join("vidq")).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[tokio::test]
async fn the_four_host_recipe_runs_as_written_and_encodes_on_an_encoding_node() {
    let root = tempfile::tempdir().unwrap();
    let s3_root = root.path().join("s3-host");
    let s3 = vidq::adapters::s3_server::EmbeddedS3::start(
        &s3_root,
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        ACCESS_KEY,
        SECRET_KEY,
    )
    .unwrap();
    let database = crate::support::db::test_database_name();
    let database_url =
        vidq::db::pool::with_database(&crate::support::db::server_url(), &database).unwrap();
    let http = free_port();
    let env = [
        ("PATH", path_with_vidq(root.path())),
        ("DATABASE_URL", database_url.clone()),
        ("VIDQ_S3_ENDPOINT", s3.endpoint()),
        ("VIDQ_S3_BUCKET", "vidq".to_owned()),
        ("VIDQ_S3_FORCE_PATH_STYLE", "true".to_owned()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_owned()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_owned()),
        ("AWS_DEFAULT_REGION", "us-east-1".to_owned()),
        ("VIDQ_PLAYBACK_SECRET", "5a".repeat(32)),
        // The test's webhook receiver listens on loopback, which a deployment refuses.
        ("VIDQ_WEBHOOK_ALLOW_PRIVATE", "true".to_owned()),
        ("RUST_LOG", "info".to_owned()),
        // Any free port: other tests run beside this one.
        ("VIDQ_RTMP_ADDR", format!("127.0.0.1:{}", free_port())),
    ];

    let blocks = sh_blocks("docs/operations.md");
    let at = blocks
        .iter()
        .position(|b| b.starts_with("export DATABASE_URL=postgres://vidq:change-me@db-host"))
        .expect("the recipe's settings block");
    let [settings, build, once, api_host, worker_host, relay_host] = &blocks[at..at + 6] else {
        panic!("the recipe has six blocks");
    };
    for name in [
        "DATABASE_URL",
        "VIDQ_S3_ENDPOINT",
        "VIDQ_S3_BUCKET",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "VIDQ_PLAYBACK_SECRET",
    ] {
        assert!(settings.contains(name), "the settings define {name}");
    }
    assert!(
        build.contains("cargo build --release --locked --no-default-features"),
        "{build}"
    );

    let host = |name: &str| {
        let dir = root.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };
    let admin = host("admin");
    let mut ran: Vec<Ran> = Vec::new();
    let once_ran = run(&admin, once, &[], &env).await;
    assert!(once_ran.success, "{once}\n{}", once_ran.output);
    let key = std::fs::read_to_string(admin.join("api-key"))
        .unwrap()
        .trim()
        .to_owned();
    assert!(key.starts_with("vidq_"), "{key}");

    let srv = |name: &str| ("/srv/vidq", host(name).display().to_string());
    let loopback = |from: &'static str, port: u16| (from, format!("127.0.0.1:{port}"));
    let api_subs = [
        srv("api-1"),
        loopback("0.0.0.0:8080", http),
        loopback("0.0.0.0:8081", free_port()),
        loopback("0.0.0.0:1935", free_port()),
    ];
    ran.push(run(&admin, api_host, &api_subs, &env).await);
    for node in ["enc-1", "enc-2"] {
        let subs = [srv(node), ("enc-1", node.to_owned())];
        ran.push(run(&admin, worker_host, &subs, &env).await);
    }
    ran.push(run(&admin, relay_host, &[srv("relay-1")], &env).await);
    let started = ran.iter().all(|r| r.success);

    let outcome = if started {
        upload_and_wait(&format!("http://127.0.0.1:{http}"), &key).await
    } else {
        Err("a host's block failed".to_owned())
    };
    for r in &ran {
        r.stop_what_is_left();
    }
    let logs: String = [
        "api-1/api.log",
        "api-1/sweeper.log",
        "enc-1/worker.log",
        "enc-2/worker.log",
        "relay-1/relay.log",
    ]
    .iter()
    .map(|log| {
        let text = std::fs::read_to_string(root.path().join(log)).unwrap_or_default();
        format!(
            "--- {log}\n{}\n",
            text.lines().rev().take(20).collect::<Vec<_>>().join("\n")
        )
    })
    .collect();
    let video = outcome.unwrap_or_else(|why| {
        let outputs: Vec<_> = ran.iter().map(|r| r.output.clone()).collect();
        panic!("{why}\n{outputs:?}\n{logs}")
    });
    let on_an_encoding_node = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE video_id = '{video}' \
         AND status = 'COMPLETED' AND claimed_by IN ('enc-1', 'enc-2')"
    );
    assert_eq!(
        count_at(&database_url, &on_an_encoding_node).await,
        1,
        "{logs}"
    );
    // Both encoding nodes came up and waited for work in the shared database.
    for node in ["enc-1", "enc-2"] {
        let log = std::fs::read_to_string(root.path().join(node).join("worker.log")).unwrap();
        assert!(
            log.contains(&format!("worker started node={node}")),
            "{log}"
        );
    }
    drop(s3);
    vidq::db::provision::drop_database(&database_url)
        .await
        .unwrap();
}

/// Registers a webhook, uploads a clip through a presigned PUT and confirms it, then waits
/// for READY and the relay's `video.ready`; the video's id.
async fn upload_and_wait(api: &str, key: &str) -> Result<String, String> {
    let http = reqwest::Client::new();
    if !answers_within(&http, &format!("{api}/readyz"), Duration::from_secs(30)).await {
        return Err("the API node never became ready".to_owned());
    }
    let receiver = Receiver::start();
    let hook = json_of(
        http.post(format!("{api}/v1/webhooks"))
            .bearer_auth(key)
            .json(&json!({"url": receiver.url})),
    )
    .await?;
    receiver.trust(hook["secret"].as_str().ok_or("no webhook secret")?);

    let clip = std::fs::read(clips::small()).unwrap();
    let contract = json_of(
        http.post(format!("{api}/v1/uploads"))
            .bearer_auth(key)
            .json(&json!({"filename": "clip.mp4", "content_type": "video/mp4", "size_bytes": clip.len()})),
    )
    .await?;
    let put = http
        .put(contract["upload_url"].as_str().ok_or("no upload_url")?)
        .header("content-type", "video/mp4")
        .body(clip)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !put.status().is_success() {
        return Err(format!("the presigned PUT answered {}", put.status()));
    }
    let upload = contract["upload_id"].as_str().ok_or("no upload_id")?;
    let video = json_of(
        http.post(format!("{api}/v1/uploads/{upload}/confirm"))
            .bearer_auth(key),
    )
    .await?;
    let id = video["id"]
        .as_str()
        .ok_or(format!("no video: {video}"))?
        .to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let now: Value = http
            .get(format!("{api}/v1/videos/{id}"))
            .bearer_auth(key)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        match now["status"].as_str() {
            Some("ready") => break,
            Some("failed") => return Err(format!("the video failed: {now}")),
            _ if std::time::Instant::now() > deadline => return Err(format!("not ready: {now}")),
            _ => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
    receiver
        .wait_until(Duration::from_secs(30), |arrivals| {
            arrivals.iter().any(|a| a.body["type"] == "video.ready")
        })
        .await;
    let ready = receiver
        .arrivals()
        .into_iter()
        .filter(|a| a.body["type"] == "video.ready" && a.body["video_id"] == id.as_str())
        .count();
    if ready == 0 {
        return Err("the relay never delivered video.ready".to_owned());
    }
    Ok(id)
}

/// The JSON body of the answer to `request`, or why there is none.
async fn json_of(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let answer = request.send().await.map_err(|e| e.to_string())?;
    answer.json().await.map_err(|e| e.to_string())
}
