//! `TestApp`: a fresh database cloned from a migrated template, an embedded S3 server on
//! `127.0.0.1:0` and the real API server on `127.0.0.1:0`, torn down when dropped; with the
//! requests and assertions on its answers that tests share. Its database comes from
//! [`crate::support::db`].

use std::sync::Arc;
use std::time::Duration;

use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use vidq::adapters::s3_server::EmbeddedS3;
use vidq::adapters::storage::{StaticCredentials, Storage};
use vidq::app::AppContext;
use vidq::config::{DatabaseConfig, Secret, StorageConfig, UploadConfig};
use vidq::db::DbPool;

use crate::support::db::TestDb;
use crate::support::process::routes_seen_dir;

pub const TEST_BUCKET: &str = "vidq-test";
/// The node name the test API spools uploads through vidq under.
pub const SPOOL_NODE: &str = "test-node";
const S3_ACCESS_KEY: &str = "test-access";
const S3_SECRET_KEY: &str = "test-secret";

/// Logs go through libtest's capture, so only a failing test's logs are shown.
fn init_test_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "info,aws_config=warn,aws_smithy_runtime=warn,actix_server=warn",
        )
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A client of the test bucket at `endpoint` with the test credentials and `timeouts`.
pub async fn storage_client(endpoint: &str, timeouts: vidq::config::S3Timeouts) -> Storage {
    storage_client_trusting(endpoint, timeouts, None).await
}

/// [`storage_client`] that also trusts `ca` (an HTTPS endpoint's certificate).
pub async fn storage_client_trusting(
    endpoint: &str,
    timeouts: vidq::config::S3Timeouts,
    ca: Option<vidq::config::CaCertificates>,
) -> Storage {
    let config = StorageConfig {
        endpoint: Some(endpoint.parse().unwrap()),
        public_endpoint: None,
        bucket: TEST_BUCKET.to_owned(),
        prefix: String::new(),
        region: "us-east-1".to_owned(),
        force_path_style: true,
        ca,
        timeouts,
    };
    let credentials = StaticCredentials {
        access_key_id: S3_ACCESS_KEY.to_owned(),
        secret_access_key: Secret::new(S3_SECRET_KEY),
    };
    Storage::connect(&config, Some(credentials)).await
}

/// PUTs `bytes` to a presigned upload contract's URL with the headers it demands, as a
/// client would.
pub async fn put_presigned(http: &reqwest::Client, upload: &Value, bytes: Vec<u8>) -> Response {
    let mut request = http.put(upload["upload_url"].as_str().unwrap()).body(bytes);
    for (name, value) in upload["headers"].as_object().unwrap() {
        request = request.header(name, value.as_str().unwrap());
    }
    request.send().await.unwrap()
}

/// Knobs a test may turn before the app starts.
pub struct TestAppOptions {
    pub max_upload_bytes: u64,
    /// `VIDQ_WEBHOOK_ALLOW_PRIVATE`: on, since test receivers listen on loopback.
    pub allow_private_webhooks: bool,
    /// `VIDQ_PUBLIC_BASE_URL`: unset, the bucket is private.
    pub public_base_url: Option<String>,
    /// `VIDQ_LIVE_IDLE_SECS` and `VIDQ_LIVE_GRACE_SECS` of the ingest.
    pub live: vidq::config::LiveArgs,
    /// `VIDQ_ADMIN_TOKEN`: unset, the dashboard is off unless an operator user exists.
    pub admin_token: Option<String>,
    /// `VIDQ_CONFIRM_BATCH_MAX` and `VIDQ_CONFIRM_COMMITTERS`: the defaults, 64 and 2.
    pub confirm_batches: (u16, u16),
    /// `VIDQ_TUS_STORE` and `VIDQ_TUS_PART_BYTES`: the spool (and 8 MiB parts).
    pub tus: (&'static str, u64),
    /// Where the spool's directory is made (a filesystem of the test's own); the system's
    /// temporary directory when unset.
    pub spool_in: Option<std::path::PathBuf>,
    /// `VIDQ_MAX_OPEN_UPLOADS_PER_USER` and `VIDQ_MAX_OPEN_RECORDINGS_PER_USER`: the
    /// defaults, 1,000 and 20.
    pub open_caps: (u32, u32),
}

impl Default for TestAppOptions {
    fn default() -> Self {
        Self {
            max_upload_bytes: 100 * 1024 * 1024,
            allow_private_webhooks: true,
            public_base_url: None,
            live: vidq::config::LiveArgs::default(),
            admin_token: None,
            confirm_batches: (64, 2),
            tus: ("spool", 8 * 1024 * 1024),
            spool_in: None,
            open_caps: (1000, 20),
        }
    }
}

/// The running API with its own database and S3.
pub struct TestApp {
    pub base: String,
    pub http: reqwest::Client,
    pub pool: DbPool,
    pub storage: Storage,
    pub s3: Option<EmbeddedS3>,
    pub ctx: AppContext,
    shutdown: CancellationToken,
    _s3_dir: tempfile::TempDir,
    /// The API's spool root for uploads through vidq (node [`SPOOL_NODE`]).
    pub spool: tempfile::TempDir,
    // Last: the database is dropped after everything that uses it.
    pub db: TestDb,
}

impl TestApp {
    pub async fn spawn() -> Self {
        Self::spawn_with(TestAppOptions::default()).await
    }

    pub async fn spawn_with(options: TestAppOptions) -> Self {
        init_test_logging();
        routes_seen_dir();
        let db = TestDb::new().await;
        let s3_dir = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s3 = EmbeddedS3::start(s3_dir.path(), listener, S3_ACCESS_KEY, S3_SECRET_KEY).unwrap();
        let storage_config = StorageConfig {
            endpoint: Some(s3.endpoint().parse().unwrap()),
            public_endpoint: None,
            bucket: TEST_BUCKET.to_owned(),
            prefix: String::new(),
            region: "us-east-1".to_owned(),
            force_path_style: true,
            ca: None,
            timeouts: Default::default(),
        };
        let database = DatabaseConfig {
            url: Secret::new(db.url.clone()),
            pool_size: 10,
        };
        let upload = UploadConfig {
            max_upload_bytes: options.max_upload_bytes,
            upload_url_ttl_secs: 600,
            playback_url_ttl_secs: 600,
            confirm_batch_max: options.confirm_batches.0,
            confirm_committers: options.confirm_batches.1,
            max_open_uploads_per_user: options.open_caps.0,
            max_open_recordings_per_user: options.open_caps.1,
        };
        let credentials = StaticCredentials {
            access_key_id: S3_ACCESS_KEY.to_owned(),
            secret_access_key: Secret::new(S3_SECRET_KEY),
        };
        let mut ctx =
            vidq::roles::api::context(&database, &storage_config, &upload, Some(credentials))
                .await
                .unwrap();
        ctx.webhooks.allow_private = options.allow_private_webhooks;
        ctx.operators.token = options.admin_token.map(Secret::new);
        let spool = match &options.spool_in {
            Some(dir) => tempfile::tempdir_in(dir),
            None => tempfile::tempdir(),
        }
        .unwrap();
        let ingest_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        ctx.ingest = Some(
            vidq::roles::api::ingest(
                spool.path(),
                SPOOL_NODE.to_owned(),
                &vidq::config::IngestArgs {
                    tus_store: options.tus.0.parse().expect("a store's name"),
                    tus_part_bytes: options.tus.1,
                    ..Default::default()
                },
                options.live,
                ingest_listener.local_addr().unwrap().port(),
            )
            .unwrap(),
        );
        ctx.playback.public_base = options.public_base_url.map(|u| u.parse().unwrap());
        ctx.storage.ensure_bucket().await.unwrap();
        // The bucket is this database's, as a deployment's first role marks it: the processes
        // a test starts later only read the marker, so a fault planned for the next PUT is not
        // spent on writing it.
        vidq::app::deployment_marker::claim(&ctx.storage, &ctx.db)
            .await
            .unwrap();
        let shutdown = CancellationToken::new();
        vidq::roles::api::listen_for_events(&ctx, &db.url, &shutdown).await;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = vidq::http::serve(listener, ctx.clone(), shutdown.clone()).unwrap();
        tokio::spawn(server);
        vidq::http::ingest_server::serve(
            ingest_listener,
            ctx.clone(),
            (&vidq::config::HttpLimits::default()).into(),
            shutdown.clone(),
        );
        Self {
            base,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            pool: ctx.db.clone(),
            storage: ctx.storage.clone(),
            s3: Some(s3),
            ctx,
            shutdown,
            _s3_dir: s3_dir,
            spool,
            db,
        }
    }

    /// Runs this node's sweeper (the real one, woken by NOTIFY like `vidq sweeper`) until
    /// the app is dropped; `store` wraps the app's S3 (faults, counts).
    pub async fn start_sweeper<S: vidq::sweeper::SweepStore>(
        &self,
        store: S,
        settings: vidq::sweeper::SweeperSettings,
    ) -> Arc<vidq::sweeper::SweepStats> {
        let sweeper = vidq::sweeper::Sweeper::start(
            self.pool.clone(),
            store,
            vidq::adapters::spool::SpoolRoot::open(self.spool.path()).unwrap(),
            settings,
            self.shutdown.clone(),
        );
        let stats = sweeper.stats();
        let wake = sweeper.waker();
        vidq::queue::listener::spawn(
            self.db.url.clone(),
            vidq::db::uploads::receiving::SWEEP_CHANNEL,
            move || wake.notify_one(),
            self.shutdown.child_token(),
        )
        .await;
        tokio::spawn(sweeper.run(self.shutdown.clone()));
        stats
    }

    /// A client of the app's bucket reached at `endpoint` (a fault proxy in front of the
    /// embedded S3), with the app's credentials.
    pub async fn storage_at(&self, endpoint: &str) -> Storage {
        storage_client(endpoint, Default::default()).await
    }

    /// Where the embedded S3 keeps its files (to see what a protocol client cannot list,
    /// such as open multipart uploads).
    pub fn s3_root(&self) -> &std::path::Path {
        self._s3_dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Creates a user through the use-case `vidq user create` runs; returns the API key.
    pub async fn create_user(&self, name: &str) -> String {
        let (_, key) = vidq::app::users::create_user(&self.pool, name)
            .await
            .unwrap();
        key.reveal().to_owned()
    }

    pub async fn get(&self, key: &str, path: &str) -> Response {
        self.http
            .get(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }

    pub async fn delete(&self, key: &str, path: &str) -> Response {
        self.http
            .delete(self.url(path))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }

    /// A single-PUT contract (`"via": "vidq"`) of `size` bytes of MP4: its id and the URL its
    /// bytes go to.
    pub async fn vidq_contract(&self, key: &str, size: usize) -> (String, String) {
        let created: Value = self
            .post(
                key,
                "/v1/uploads",
                &serde_json::json!({"filename": "clip.mp4", "content_type": "video/mp4",
                        "size_bytes": size, "via": "vidq"}),
            )
            .await
            .json()
            .await
            .unwrap();
        (
            created["upload_id"].as_str().unwrap().to_owned(),
            created["upload_url"].as_str().unwrap().to_owned(),
        )
    }

    pub async fn post(&self, key: &str, path: &str, body: &Value) -> Response {
        self.http
            .post(self.url(path))
            .bearer_auth(key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// `POST /v1/uploads` for a video of `size` bytes; asserts 201 and returns the body.
    pub async fn create_upload(&self, key: &str, size: usize) -> Value {
        let response = self
            .post(
                key,
                "/v1/uploads",
                &json!({ "filename": "clip.mp4", "content_type": "video/mp4", "size_bytes": size }),
            )
            .await;
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json().await.unwrap()
    }

    /// PUTs `bytes` to a presigned upload URL with the headers it demands, as a client would.
    pub async fn put_to(&self, upload: &Value, bytes: Vec<u8>) -> Response {
        put_presigned(&self.http, upload, bytes).await
    }

    /// PUTs `bytes` with the contract's signed headers except `content-length`, which is
    /// the body's own: a client sending another size than it declared.
    pub async fn put_to_with_length(&self, upload: &Value, bytes: Vec<u8>) -> Response {
        let mut request = self
            .http
            .put(upload["upload_url"].as_str().unwrap())
            .body(bytes);
        for (name, value) in upload["headers"].as_object().unwrap() {
            if name != "content-length" {
                request = request.header(name, value.as_str().unwrap());
            }
        }
        request.send().await.unwrap()
    }

    /// `GET /v1/videos/{id}`: asserts 200 and returns the video.
    pub async fn video(&self, key: &str, id: &dyn std::fmt::Display) -> Value {
        let response = self.get(key, &format!("/v1/videos/{id}")).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    pub async fn confirm(&self, key: &str, upload_id: &str) -> Response {
        self.post(key, &format!("/v1/uploads/{upload_id}/confirm"), &json!({}))
            .await
    }

    /// Create, PUT and confirm a fake video; returns the confirmed video's JSON.
    pub async fn uploaded_video(&self, key: &str) -> Value {
        let bytes = b"not really a video, but the API only checks size".to_vec();
        let upload = self.create_upload(key, bytes.len()).await;
        assert!(self.put_to(&upload, bytes).await.status().is_success());
        let response = self
            .confirm(key, upload["upload_id"].as_str().unwrap())
            .await;
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        response.json().await.unwrap()
    }

    /// A single number from SQL (`SELECT count(*)::bigint AS n ...`).
    pub async fn count(&self, sql: &str) -> i64 {
        #[derive(QueryableByName)]
        struct N {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut conn = self.pool.get().await.unwrap();
        let row: N = diesel::sql_query(sql).get_result(&mut conn).await.unwrap();
        row.n
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Asserts the response has this status and the error body's `code`.
pub async fn assert_error(response: Response, status: StatusCode, code: &str) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    body
}
