//! vidq spread over machines as an operator runs it: `vidq api` and `vidq sweeper` on node
//! `api-1` sharing one spool, and a `vidq worker` on node `enc-1` that shares nothing with
//! them but PostgreSQL and S3 (no `VIDQ_SPOOL_DIR`, its own working directory). Each role is
//! its own process. S3 sits behind a proxy the test controls, so it can be down (answering
//! 503, never answering, or refusing connections) and come back with nothing restarted.
//! Every test ends with no `pending` row in the ledger and `vidq reconcile` exiting 0.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};
use tokio::process::Child;
use tokio_util::sync::CancellationToken;

use vidq::adapters::s3_server::EmbeddedS3;
use vidq::adapters::storage::Storage;
use vidq::db::DbPool;

use crate::harness::{TEST_BUCKET, TestDb, free_port, vidq_child};
use crate::reconcile::{expect, reconcile_at};
use crate::s3_faults::S3Faults;

/// The API node's name; its sweeper runs under the same one.
const API_NODE: &str = "api-1";
/// The encoding node's name.
const WORKER_NODE: &str = "enc-1";

/// The database, the bucket, and the three processes of a small deployment.
struct Deployment {
    db: TestDb,
    pool: DbPool,
    /// The bucket, reached directly (not through the proxy the processes use).
    storage: Storage,
    s3: EmbeddedS3,
    /// `http://127.0.0.1:PORT` of the API.
    api: String,
    http: reqwest::Client,
    root: tempfile::TempDir,
    processes: Vec<Child>,
    _s3_dir: tempfile::TempDir,
}

impl Deployment {
    /// The database and the embedded S3 (with its bucket); no process yet.
    async fn prepare() -> Self {
        let db = TestDb::new().await;
        let pool = vidq::db::connect(&db.url, 4).await.unwrap();
        let s3_dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s3 = EmbeddedS3::start(s3_dir.path(), listener, "test-access", "test-secret").unwrap();
        let root = tempfile::tempdir().unwrap();
        let deployment = Self {
            storage: crate::harness::storage_client(&s3.endpoint(), Default::default()).await,
            db,
            pool,
            s3,
            api: String::new(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            root,
            processes: Vec::new(),
            _s3_dir: s3_dir,
        };
        deployment.storage.ensure_bucket().await.unwrap();
        deployment
    }

    /// A node's own working directory (`api-1`, `enc-1`), made on first use.
    fn node_dir(&self, node: &str) -> PathBuf {
        let dir = self.root.path().join(node);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn log(&self, role: &str) -> PathBuf {
        self.root.path().join(format!("{role}.log"))
    }

    /// `vidq ROLE` with the database and the bucket at `s3` (the proxy), working in `node`'s
    /// directory.
    fn command(&self, role: &str, node: &str, s3: &str) -> tokio::process::Command {
        let mut command = vidq_child(role, &self.log(role));
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
        command
    }

    /// Starts `vidq api` and `vidq sweeper` on `api-1` (one spool) and `vidq worker` on
    /// `enc-1`, all reaching S3 at `s3`; returns once the API answers `/healthz`.
    async fn start(&mut self, s3: &str) {
        let spool = self.node_dir(API_NODE).join("spool");
        let (http, ingest) = (free_port(), free_port());
        let api = self
            .command("api", API_NODE, s3)
            .env("VIDQ_SPOOL_DIR", &spool)
            .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{http}"))
            .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{ingest}"))
            .env("VIDQ_LIVE_IDLE_SECS", "30")
            .env("VIDQ_LIVE_GRACE_SECS", "1")
            .spawn()
            .unwrap();
        let sweeper = self
            .command("sweeper", API_NODE, s3)
            .env("VIDQ_SPOOL_DIR", &spool)
            .env("VIDQ_LIVE_GRACE_SECS", "1")
            .env("VIDQ_SWEEPER_INTERVAL_MS", "200")
            .env("VIDQ_SWEEPER_BREAKER_COOLDOWN_MS", "500")
            .spawn()
            .unwrap();
        let work = self.node_dir(WORKER_NODE).join("work");
        let worker = self
            .command("worker", WORKER_NODE, s3)
            .env("VIDQ_WORK_DIR", &work)
            .env("VIDQ_LEASE_SECS", "10")
            .env("VIDQ_HEARTBEAT_SECS", "2")
            .env("VIDQ_POLL_MS", "200")
            .spawn()
            .unwrap();
        assert!(
            !work.starts_with(&spool) && !spool.starts_with(self.node_dir(WORKER_NODE)),
            "the worker's disk is not the API node's"
        );
        self.processes.extend([api, sweeper, worker]);
        self.api = format!("http://127.0.0.1:{http}");
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
    fn logs(&self) -> String {
        ["api", "sweeper", "worker"]
            .iter()
            .map(|role| {
                let text = std::fs::read_to_string(self.log(role)).unwrap_or_default();
                format!("--- {role}\n{text}")
            })
            .collect()
    }

    async fn user(&self, name: &str) -> String {
        let (_, key) = vidq::app::users::create_user(&self.pool, name)
            .await
            .unwrap();
        key.reveal().to_owned()
    }

    async fn count(&self, sql: &str) -> i64 {
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
    async fn wait_for(&self, sql: &str, want: i64, within: Duration) {
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

    async fn get(&self, key: &str, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.api))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }

    async fn post(&self, key: &str, path: &str, body: &Value) -> reqwest::Response {
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
    async fn ends_clean(&self) {
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

/// How the S3 behind a [`Switch`] behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Connections reach S3.
    Up,
    /// Connections are accepted and never answered.
    Silent,
    /// Nothing listens: connections are refused.
    Refused,
}

/// A TCP switch in front of S3 on a fixed loopback port.
struct Switch {
    port: u16,
    upstream: String,
    mode: Arc<Mutex<Mode>>,
    /// Cancelled to close the listener and every connection of the current mode.
    generation: Mutex<CancellationToken>,
}

impl Switch {
    async fn start(upstream: std::net::SocketAddr, mode: Mode) -> Self {
        let switch = Self {
            port: free_port(),
            upstream: upstream.to_string(),
            mode: Arc::new(Mutex::new(mode)),
            generation: Mutex::new(CancellationToken::new()),
        };
        switch.set(mode).await;
        switch
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Closes what the previous mode had open and behaves as `mode` from now on.
    async fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
        let token = {
            let mut generation = self.generation.lock().unwrap();
            generation.cancel();
            *generation = CancellationToken::new();
            generation.clone()
        };
        if mode == Mode::Refused {
            return;
        }
        // The previous mode's listener closes once its task sees the cancellation.
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            let socket = TcpSocket::new_v4().unwrap();
            socket.set_reuseaddr(true).unwrap();
            let bound = socket
                .bind(format!("127.0.0.1:{}", self.port).parse().unwrap())
                .and_then(|()| socket.listen(1024));
            match bound {
                Ok(listener) => break listener,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot listen on {} again: {e}", self.port),
            }
        };
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            loop {
                let (mut client, _) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(_) => return,
                    },
                    () = token.cancelled() => return,
                };
                let (token, upstream) = (token.clone(), upstream.clone());
                tokio::spawn(async move {
                    if mode == Mode::Silent {
                        token.cancelled().await;
                        return;
                    }
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        () = token.cancelled() => {}
                    }
                });
            }
        });
    }
}

/// FFmpeg as a live encoder: `seconds` of test picture and tone in real time, cut into 2 s
/// fMP4 segments and PUT to `ingest` (the recording's ingest URL).
async fn broadcast(ingest: &str, seconds: u32) {
    let out = tokio::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-re"])
        .args(["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"])
        .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"])
        .args(["-t", &seconds.to_string()])
        .args([
            "-c:v",
            "libx264",
            "-g",
            "50",
            "-preset",
            "ultrafast",
            "-pix_fmt",
            "yuv420p",
        ])
        .args(["-c:a", "aac"])
        .args(["-f", "hls", "-hls_segment_type", "fmp4", "-hls_time", "2"])
        .args(["-hls_playlist_type", "event", "-method", "PUT"])
        .arg(format!("{ingest}index.m3u8"))
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The recording's video once READY, as its owner reads it.
async fn ready_video_of(d: &Deployment, key: &str, recording: &str) -> Value {
    d.wait_for(
        &format!(
            "SELECT count(*) AS n FROM videos WHERE recording_id = '{recording}' AND status = 'ready'"
        ),
        1,
        Duration::from_secs(120),
    )
    .await;
    let status: Value = d
        .get(key, &format!("/v1/live/{recording}"))
        .await
        .json()
        .await
        .unwrap();
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
        // A few sweeper rounds into the outage.
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
        crate::live_recovery::played_seconds(video["playback"]["hls_url"].as_str().unwrap()).await;
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
    let clip = crate::clips::small();
    let tus = crate::tus_clients::run_client(
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
    crate::harness::assert_error(
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
    let put = crate::harness::put_presigned(&d.http, &presigned, bytes).await;
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
