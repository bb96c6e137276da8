//! The `vidq` binary as an operator runs it.

use crate::support::app::TestApp;
use crate::support::cli::{stderr, vidq};
use crate::support::db::TestDb;

#[tokio::test]
async fn help_lists_the_roles_and_each_role_explains_its_settings() {
    let top = vidq(&["--help"], &[]).await;
    let text = String::from_utf8_lossy(&top.stdout);
    for role in ["api", "worker", "relay", "dev", "migrate", "user"] {
        assert!(text.contains(role), "{text}");
    }
    let api = vidq(&["api", "--help"], &[]).await;
    let text = String::from_utf8_lossy(&api.stdout);
    for variable in [
        "DATABASE_URL",
        "VIDQ_HTTP_ADDR",
        "VIDQ_S3_BUCKET",
        "VIDQ_S3_ENDPOINT",
        "VIDQ_MAX_UPLOAD_BYTES",
    ] {
        assert!(
            text.contains(variable),
            "{variable} missing from api --help"
        );
    }
}

#[tokio::test]
async fn the_relay_explains_its_settings_and_refuses_bad_ones() {
    let help = vidq(&["relay", "--help"], &[]).await;
    let text = String::from_utf8_lossy(&help.stdout);
    for variable in [
        "DATABASE_URL",
        "VIDQ_NATS_URL",
        "VIDQ_WEBHOOK_ALLOW_PRIVATE",
        "VIDQ_WEBHOOK_RETRY_SCHEDULE",
        "VIDQ_WEBHOOK_TIMEOUT_MS",
        "VIDQ_RELAY_LEASE_SECS",
    ] {
        assert!(
            text.contains(variable),
            "{variable} missing from relay --help"
        );
    }
    // `dev` runs every role in one process: its settings must not collide.
    assert!(vidq(&["dev", "--help"], &[]).await.status.success());

    let db = [("DATABASE_URL", "postgres://localhost/x")];
    let mut env = db.to_vec();
    env.push(("VIDQ_WEBHOOK_RETRY_SCHEDULE", "0,5d"));
    let out = vidq(&["relay"], &env).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("VIDQ_WEBHOOK_RETRY_SCHEDULE"),
        "{}",
        stderr(&out)
    );
    let mut env = db.to_vec();
    env.extend([
        ("VIDQ_RELAY_LEASE_SECS", "10"),
        ("VIDQ_WEBHOOK_TIMEOUT_MS", "15000"),
    ]);
    let out = vidq(&["relay"], &env).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("VIDQ_RELAY_LEASE_SECS"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_missing_setting_fails_at_start_naming_its_variable() {
    let out = vidq(&["api"], &[("VIDQ_S3_BUCKET", "media")]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("DATABASE_URL"), "{}", stderr(&out));
    let out = vidq(&["api"], &[("DATABASE_URL", "postgres://localhost/x")]).await;
    assert!(stderr(&out).contains("VIDQ_S3_BUCKET"), "{}", stderr(&out));
}

#[tokio::test]
async fn a_bad_setting_fails_at_start_naming_its_variable() {
    let base = [
        ("DATABASE_URL", "postgres://localhost/x"),
        ("VIDQ_S3_BUCKET", "media"),
    ];
    for (name, value) in [
        ("VIDQ_HTTP_ADDR", "not-an-address"),
        ("VIDQ_MAX_UPLOAD_BYTES", "lots"),
        ("VIDQ_S3_BUCKET", "Bad_Bucket"),
        ("VIDQ_RTMP_ADDR", "not-an-address"),
        ("VIDQ_RTMP_PUBLIC_URL", "rtmp://live.example.com/app"),
    ] {
        let mut env = base.to_vec();
        env.push((name, value));
        let out = vidq(&["api"], &env).await;
        assert_eq!(out.status.code(), Some(2), "{name}");
        assert!(stderr(&out).contains(name), "{name}: {}", stderr(&out));
    }
    // A worker opens no public port: its health listener takes loopback addresses only.
    let mut env = base.to_vec();
    env.push(("VIDQ_HEALTH_LISTEN", "0.0.0.0:9091"));
    let out = vidq(&["worker"], &env).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("VIDQ_HEALTH_LISTEN") && stderr(&out).contains("loopback only"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_worker_without_its_media_tools_refuses_to_start() {
    let out = vidq(
        &["worker"],
        &[
            ("DATABASE_URL", "postgres://localhost/x"),
            ("VIDQ_S3_BUCKET", "media"),
            ("VIDQ_S3_ENDPOINT", "http://127.0.0.1:9"),
            ("VIDQ_FFMPEG", "/nonexistent/vidq-tools/ffmpeg"),
        ],
    )
    .await;
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("VIDQ_FFMPEG") && stderr(&out).contains("not found"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_worker_without_scratch_space_says_so_at_start() {
    let db = TestDb::new().await;
    // A directory nobody can make, root included.
    let out = vidq(
        &["worker"],
        &[
            ("DATABASE_URL", &db.url),
            ("VIDQ_S3_BUCKET", "media"),
            ("VIDQ_S3_ENDPOINT", "http://127.0.0.1:9"),
            ("VIDQ_WORK_DIR", "/proc/vidq-scratch"),
        ],
    )
    .await;
    assert_ne!(out.status.code(), Some(0));
    let text = stderr(&out);
    assert!(
        text.contains("cannot encode or repackage")
            && text.contains("/proc/vidq-scratch (VIDQ_WORK_DIR) is not writable"),
        "{text}"
    );
}

#[tokio::test]
async fn vidq_log_format_json_writes_one_json_object_per_log_line() {
    let db = TestDb::new().await;
    let out = vidq(
        &["migrate"],
        &[("DATABASE_URL", &db.url), ("VIDQ_LOG_FORMAT", "json")],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stderr(&out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert!(!lines.is_empty());
    let schema = lines
        .iter()
        .find(|l| l["fields"]["applied"].is_number())
        .unwrap_or_else(|| panic!("no line with the applied count: {lines:?}"));
    assert_eq!(schema["level"], "INFO");
    assert!(schema["timestamp"].is_string() && schema["target"].is_string());
    // The flag says the same, and a wrong value is refused naming the choices.
    let flag = vidq(
        &["--log-format", "json", "migrate"],
        &[("DATABASE_URL", &db.url)],
    )
    .await;
    assert!(
        stderr(&flag).lines().all(|l| l.starts_with('{')),
        "{}",
        stderr(&flag)
    );
    let wrong = vidq(
        &["migrate"],
        &[("DATABASE_URL", &db.url), ("VIDQ_LOG_FORMAT", "xml")],
    )
    .await;
    assert!(!wrong.status.success());
    assert!(
        stderr(&wrong).contains("text") && stderr(&wrong).contains("json"),
        "{}",
        stderr(&wrong)
    );
}

#[tokio::test]
async fn migrate_applies_the_schema_to_an_empty_database() {
    let db = TestDb::new().await;
    // The template already carries the schema: check migrate is a no-op there, then run it on
    // a truly empty database.
    let out = vidq(&["migrate"], &[("DATABASE_URL", &db.url)]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let empty = TestDbEmpty::new().await;
    let out = vidq(&["migrate"], &[("DATABASE_URL", &empty.url)]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let migrations = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .count();
    assert!(
        stderr(&out).contains(&format!("applied={migrations}")),
        "{}",
        stderr(&out)
    );
    let again = vidq(&["migrate"], &[("DATABASE_URL", &empty.url)]).await;
    assert!(
        stderr(&again).contains("applied=0"),
        "a second run changes nothing: {}",
        stderr(&again)
    );
}

/// A database with no schema at all.
struct TestDbEmpty {
    url: String,
}

impl TestDbEmpty {
    async fn new() -> Self {
        let name = crate::support::db::test_database_name();
        let url = vidq::db::pool::with_database(&crate::support::db::server_url(), &name).unwrap();
        vidq::db::provision::create_database_if_missing(&url)
            .await
            .unwrap();
        Self { url }
    }
}

impl Drop for TestDbEmpty {
    fn drop(&mut self) {
        let url = self.url.clone();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(vidq::db::provision::drop_database(&url))
        })
        .join();
    }
}

#[tokio::test]
async fn user_create_prints_only_a_working_key_and_user_delete_removes_the_user() {
    let app = TestApp::spawn().await;
    let env = [("DATABASE_URL", app.db.url.as_str())];
    let out = vidq(&["user", "create", "--name", "carol"], &env).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "only the key on stdout: {stdout:?}"
    );
    let key = stdout.trim();
    assert_eq!(
        app.get(key, "/v1/videos").await.status(),
        reqwest::StatusCode::OK
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM users WHERE api_key_hash = decode('{}', 'hex')",
            hex::encode(vidq::domain::api_key::hash_presented_key(key))
        ))
        .await,
        1,
        "only the hash is stored"
    );

    let again = vidq(&["user", "create", "--name", "carol"], &env).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );

    let s3_endpoint = app.s3.as_ref().unwrap().endpoint();
    let delete_env = [
        ("DATABASE_URL", app.db.url.as_str()),
        ("VIDQ_S3_ENDPOINT", s3_endpoint.as_str()),
        ("VIDQ_S3_BUCKET", crate::support::app::TEST_BUCKET),
        ("VIDQ_S3_FORCE_PATH_STYLE", "true"),
        ("AWS_ACCESS_KEY_ID", "test-access"),
        ("AWS_SECRET_ACCESS_KEY", "test-secret"),
    ];
    app.uploaded_video(key).await;
    let out = vidq(&["user", "delete", "--name", "carol"], &delete_env).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("1 videos, 1 objects"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        app.get(key, "/v1/videos").await.status(),
        reqwest::StatusCode::UNAUTHORIZED
    );
    assert!(
        app.storage
            .list_prefix("originals/")
            .await
            .unwrap()
            .is_empty()
    );
    let missing = vidq(&["user", "delete", "--name", "carol"], &delete_env).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("no such user"),
        "{}",
        stderr(&missing)
    );
}
