//! A small deployment of real `vidq` processes for multi-node tests: `vidq api` and `vidq
//! sweeper` on node `api-1` sharing one spool, a `vidq worker` on node `enc-1` with its own
//! working directory and no spool, one database and one embedded S3, reached by the
//! processes at an endpoint the test chooses (S3 itself, or a proxy in front of it).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::Child;

use vidq::adapters::s3_server::EmbeddedS3;
use vidq::adapters::storage::Storage;
use vidq::db::DbPool;

use crate::support::app::TEST_BUCKET;
use crate::support::db::TestDb;
use crate::support::process::{free_port, vidq_child};
use crate::support::reconcile::{expect, reconcile_at};

/// The API node's name; its sweeper runs under the same one.
pub const API_NODE: &str = "api-1";
/// The encoding node's name.
pub const WORKER_NODE: &str = "enc-1";

/// The database, the bucket, and the three processes of a small deployment.
pub struct Deployment {
    pub db: TestDb,
    pub pool: DbPool,
    /// The bucket, reached directly (not through the proxy the processes use).
    pub storage: Storage,
    pub s3: EmbeddedS3,
    /// `http://127.0.0.1:PORT` of the API.
    pub api: String,
    pub http: reqwest::Client,
    pub root: tempfile::TempDir,
    /// The API, the sweeper and the worker, in that order.
    pub processes: Vec<Child>,
    /// How the API was started, to start it again after a kill.
    api_start: Option<ApiStart>,
    /// The certificate every process trusts (`VIDQ_S3_CA_FILE`), when S3 speaks HTTPS.
    pub ca_file: Option<PathBuf>,
    /// Settings every process of the deployment gets (e.g. `VIDQ_S3_PREFIX`).
    pub env: Vec<(String, String)>,
    _s3_dir: tempfile::TempDir,
}

/// What starting the API took: where S3 is, its ports, its extra settings.
struct ApiStart {
    s3: String,
    http: u16,
    ingest: u16,
    env: Vec<(String, String)>,
}

impl Deployment {
    /// The database and the embedded S3 (with its bucket); no process yet.
    pub async fn prepare() -> Self {
        Self::prepare_s3(false).await
    }

    /// [`Deployment::prepare`] with the S3 over HTTPS, its self-signed certificate written
    /// to a file every process is given as `VIDQ_S3_CA_FILE`.
    pub async fn prepare_tls() -> Self {
        Self::prepare_s3(true).await
    }

    async fn prepare_s3(tls: bool) -> Self {
        Self::prepare_with(TestDb::new().await, tls).await
    }

    /// [`Deployment::prepare`] on a database the test made (e.g. on a private server it
    /// restarts); the API's migrations make its schema.
    pub async fn prepare_on(db: TestDb) -> Self {
        Self::prepare_with(db, false).await
    }

    async fn prepare_with(db: TestDb, tls: bool) -> Self {
        let pool = vidq::db::connect(&db.url, 4).await.unwrap();
        let s3_dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s3 = if tls {
            EmbeddedS3::start_tls(s3_dir.path(), listener, "test-access", "test-secret")
        } else {
            EmbeddedS3::start(s3_dir.path(), listener, "test-access", "test-secret")
        }
        .unwrap();
        let root = tempfile::tempdir().unwrap();
        let ca_file = s3.certificate().map(|certificate| {
            let path = root.path().join("s3-ca.pem");
            std::fs::write(&path, &certificate.pem).unwrap();
            path
        });
        let storage = crate::support::app::storage_client_trusting(
            &s3.endpoint(),
            Default::default(),
            s3.certificate().cloned(),
        )
        .await;
        let deployment = Self {
            storage,
            db,
            pool,
            s3,
            api: String::new(),
            // An idle connection is dropped here before a server or HAProxy may close it
            // (`timeout http-keep-alive`), so no request goes out on a connection being closed.
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .pool_idle_timeout(Duration::from_secs(3))
                .build()
                .unwrap(),
            root,
            processes: Vec::new(),
            api_start: None,
            ca_file,
            env: Vec::new(),
            _s3_dir: s3_dir,
        };
        deployment.storage.ensure_bucket().await.unwrap();
        deployment
    }

    /// [`Deployment::prepare`], then [`Deployment::start`] with S3 reached directly.
    pub async fn started() -> Self {
        let mut d = Self::prepare().await;
        let s3 = d.s3.endpoint();
        d.start(&s3).await;
        d
    }

    /// The body of `GET url` (a whole URL: a playlist, `/metrics`), as text.
    pub async fn text(&self, url: &str) -> String {
        self.http
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A node's own working directory (`api-1`, `enc-1`), made on first use.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        let dir = self.root.path().join(node);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub fn log(&self, role: &str) -> PathBuf {
        self.root.path().join(format!("{role}.log"))
    }

    /// `vidq ROLE` with the database and the bucket at `s3` (the proxy), working in `node`'s
    /// directory.
    pub fn command(&self, role: &str, node: &str, s3: &str) -> tokio::process::Command {
        self.command_logged(role, node, s3, role)
    }

    /// [`Deployment::command`] logging to `{log}.log` (one of several processes of a role).
    pub fn command_logged(
        &self,
        role: &str,
        node: &str,
        s3: &str,
        log: &str,
    ) -> tokio::process::Command {
        let mut command = vidq_child(role, &self.log(log));
        command
            .current_dir(self.node_dir(node))
            .env("DATABASE_URL", &self.db.url)
            .env("VIDQ_NODE_ID", node)
            .env("VIDQ_S3_ENDPOINT", s3)
            .env("VIDQ_S3_BUCKET", TEST_BUCKET)
            .env("VIDQ_S3_FORCE_PATH_STYLE", "true")
            .env("AWS_ACCESS_KEY_ID", "test-access")
            .env("AWS_SECRET_ACCESS_KEY", "test-secret")
            // Short bounds, so an S3 that never answers costs seconds, not minutes.
            .env("VIDQ_S3_CONNECT_TIMEOUT_MS", "500")
            .env("VIDQ_S3_READ_TIMEOUT_SECS", "2")
            .env("VIDQ_S3_OPERATION_TIMEOUT_SECS", "3")
            .env("VIDQ_S3_TRANSFER_TIMEOUT_SECS", "10");
        if let Some(ca) = &self.ca_file {
            command.env("VIDQ_S3_CA_FILE", ca);
        }
        command.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command
    }

    /// Starts `vidq api` and `vidq sweeper` on `api-1` (one spool) and `vidq worker` on
    /// `enc-1`, all reaching S3 at `s3`; returns once the API answers `/healthz`.
    pub async fn start(&mut self, s3: &str) {
        self.start_with(s3, &[]).await;
    }

    /// [`Deployment::start`], with more settings for the API node's processes (the API and
    /// its sweeper; each ignores what is not its own).
    pub async fn start_with(&mut self, s3: &str, api_env: &[(&str, &str)]) {
        let spool = self.node_dir(API_NODE).join("spool");
        self.api_start = Some(ApiStart {
            s3: s3.to_owned(),
            http: free_port(),
            ingest: free_port(),
            env: api_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        });
        let api = self.spawn_api();
        let sweeper = self
            .command("sweeper", API_NODE, s3)
            .envs(api_env.iter().copied())
            .env("VIDQ_SPOOL_DIR", &spool)
            .env("VIDQ_LIVE_GRACE_SECS", "1")
            .env("VIDQ_SWEEPER_INTERVAL_MS", "200")
            .env("VIDQ_SWEEPER_BREAKER_COOLDOWN_MS", "500")
            .spawn()
            .unwrap();
        let worker = self.spawn_worker(s3);
        let work = self.node_dir(WORKER_NODE).join("work");
        assert!(
            !work.starts_with(&spool) && !spool.starts_with(self.node_dir(WORKER_NODE)),
            "the worker's disk is not the API node's"
        );
        self.processes.extend([api, sweeper, worker]);
        self.wait_for_api().await;
    }

    /// [`Deployment::start`] with the API's RTMP listener on a port of its own.
    pub async fn start_with_rtmp(&mut self) {
        let s3 = self.s3.endpoint();
        let rtmp = format!("127.0.0.1:{}", free_port());
        self.start_with(&s3, &[("VIDQ_RTMP_ADDR", &rtmp)]).await;
    }

    /// `vidq worker` on `enc-1`, with its own working directory, reaching S3 at `s3`.
    pub fn spawn_worker(&self, s3: &str) -> Child {
        self.command("worker", WORKER_NODE, s3)
            .env("VIDQ_WORK_DIR", self.node_dir(WORKER_NODE).join("work"))
            .env("VIDQ_LEASE_SECS", "10")
            .env("VIDQ_HEARTBEAT_SECS", "2")
            .env("VIDQ_POLL_MS", "200")
            .spawn()
            .unwrap()
    }

    /// `vidq api` as [`Deployment::start_with`] started it (the same ports and settings).
    fn spawn_api(&mut self) -> Child {
        let start = self.api_start.as_ref().expect("started once");
        let spool = self.node_dir(API_NODE).join("spool");
        self.api = format!("http://127.0.0.1:{}", start.http);
        self.command("api", API_NODE, &start.s3)
            .envs(start.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("VIDQ_SPOOL_DIR", &spool)
            .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{}", start.http))
            .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{}", start.ingest))
            .env("VIDQ_LIVE_IDLE_SECS", "30")
            .env("VIDQ_LIVE_GRACE_SECS", "1")
            .spawn()
            .unwrap()
    }

    /// Kills the API with SIGKILL (a crash: nothing of it runs after), waits for it to be
    /// gone, and starts it again on the same ports; returns once it answers `/healthz`.
    pub async fn crash_and_restart_api(&mut self) {
        let api = &mut self.processes[0];
        api.start_kill().unwrap();
        api.wait().await.unwrap();
        self.processes[0] = self.spawn_api();
        self.wait_for_api().await;
    }

    /// Returns once the API answers `/healthz`; panics with the logs if a role exits first.
    async fn wait_for_api(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .http
            .get(format!("{}/healthz", self.api))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            for child in &mut self.processes {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("a role exited at start ({status}):\n{}", self.logs());
                }
            }
            assert!(
                Instant::now() < deadline,
                "the API did not start:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every role's log, for a failing assertion.
    pub fn logs(&self) -> String {
        ["api", "sweeper", "worker", "api-1", "api-2", "api-3"]
            .iter()
            .filter(|role| self.log(role).exists())
            .map(|role| {
                let text = std::fs::read_to_string(self.log(role)).unwrap_or_default();
                format!("--- {role}\n{text}")
            })
            .collect()
    }

    pub async fn user(&self, name: &str) -> String {
        let (_, key) = vidq::app::users::create_user(&self.pool, name)
            .await
            .unwrap();
        key.reveal().to_owned()
    }

    /// `POST /v1/live` for `key`: the new recording as the API shows it (`id`,
    /// `ingest_url`, `playback_url`, ...).
    pub async fn live_recording(&self, key: &str) -> Value {
        let made = self.post(key, "/v1/live", &serde_json::json!({})).await;
        assert_eq!(made.status(), reqwest::StatusCode::CREATED);
        made.json().await.unwrap()
    }

    /// Waits (at most 2 min) until `recording` has become a READY video; returns the
    /// recording as its owner `key` reads it then.
    pub async fn recording_when_ready(&self, key: &str, recording: &str) -> Value {
        self.wait_for(
            &format!(
                "SELECT count(*) AS n FROM videos WHERE recording_id = '{recording}' AND status = 'ready'"
            ),
            1,
            Duration::from_secs(120),
        )
        .await;
        self.get(key, &format!("/v1/live/{recording}"))
            .await
            .json()
            .await
            .unwrap()
    }

    pub async fn count(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut conn = self.pool.get().await.unwrap();
        diesel_async::RunQueryDsl::get_result::<Count>(diesel::sql_query(sql), &mut conn)
            .await
            .unwrap()
            .n
    }

    /// Waits (at most `within`) until `sql` (a `count(*) AS n` query) returns `want`.
    pub async fn wait_for(&self, sql: &str, want: i64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let n = self.count(sql).await;
            if n == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{sql}: {n}, not {want}, after {within:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn get(&self, key: &str, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.api))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }

    pub async fn post(&self, key: &str, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.api))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// The end of every test: nothing is owed to S3 and `vidq reconcile` finds the ledger
    /// and the bucket in agreement.
    pub async fn ends_clean(&self) {
        for table in ["uploads", "recording_files", "video_artifacts"] {
            assert_eq!(
                self.count(&format!(
                    "SELECT count(*) AS n FROM {table} WHERE state = 'pending'"
                ))
                .await,
                0,
                "{table} has pending rows"
            );
        }
        expect(
            &reconcile_at(&self.db.url, &self.s3.endpoint(), &["--grace-secs", "0"]).await,
            0,
        );
    }
}

/// Where an RTMP encoder publishes a new recording: its `rtmp_url` and stream key.
pub fn publish_url(recording: &Value) -> String {
    format!(
        "{}/{}",
        recording["rtmp_url"]
            .as_str()
            .expect("the API listens for RTMP"),
        recording["stream_key"].as_str().unwrap()
    )
}

/// FFmpeg as an HLS encoder: `seconds` of test picture and tone (in real time when
/// `realtime`), cut into 2 s fMP4 segments with a keyframe every 2 s; the caller adds where
/// they go (a directory, or `-method PUT` and an ingest URL).
pub fn hls_encoder(seconds: u32, realtime: bool) -> tokio::process::Command {
    hls_encoder_cut(seconds, realtime, 50, 2)
}

/// [`hls_encoder`] with a keyframe every `gop` frames (25 a second, exactly: no cut at a
/// scene change) and segments of at least `segment_secs`, cut at the next keyframe.
pub fn hls_encoder_cut(
    seconds: u32,
    realtime: bool,
    gop: u32,
    segment_secs: u32,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("ffmpeg");
    command.args(["-nostdin", "-v", "error"]);
    if realtime {
        command.arg("-re");
    }
    let gop = gop.to_string();
    command
        .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"])
        .args(["-t", &seconds.to_string()])
        .args(["-c:v", "libx264", "-g", &gop, "-keyint_min", &gop])
        .args(["-sc_threshold", "0", "-preset", "ultrafast"])
        .args(["-pix_fmt", "yuv420p", "-c:a", "aac"])
        .args(["-f", "hls", "-hls_segment_type", "fmp4"])
        .args(["-hls_time", &segment_secs.to_string()])
        .kill_on_drop(true);
    command
}

/// FFmpeg as a live encoder: `seconds` in real time, PUT to `ingest` (the recording's ingest
/// URL) as it is made.
pub async fn broadcast(ingest: &str, seconds: u32) {
    let out = hls_encoder(seconds, true)
        .args(["-hls_playlist_type", "event", "-method", "PUT"])
        .arg(format!("{ingest}index.m3u8"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
