//! `TestApp`: a fresh database cloned from a migrated template, an embedded S3 server on
//! `127.0.0.1:0` and the real API server on `127.0.0.1:0`, torn down when dropped.
//!
//! `VIDQ_TEST_DATABASE_URL` points at the server to use (default
//! `postgres://postgres@127.0.0.1:5432/postgres`, or a private server when nothing answers
//! there).

use std::sync::Arc;
use std::time::Duration;

use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use reqwest::{Response, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use vidq::adapters::s3_server::EmbeddedS3;
use vidq::adapters::storage::{StaticCredentials, Storage};
use vidq::app::AppContext;
use vidq::config::{DatabaseConfig, Secret, StorageConfig, UploadConfig};
use vidq::db::{self, DbPool};

pub const TEST_BUCKET: &str = "vidq-test";
/// The node name the test API spools uploads through vidq under.
pub const SPOOL_NODE: &str = "test-node";
const S3_ACCESS_KEY: &str = "test-access";
const S3_SECRET_KEY: &str = "test-secret";

/// Where this run of the suite records every (method, route, status) the API answers, in
/// its own process and in the `vidq` processes it starts; `tests/routes_documented.rs`
/// (run after this binary) holds `/openapi.json` to them. Earlier runs' records go.
pub fn routes_seen_dir() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let all = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("routes-seen");
        if let Ok(entries) = std::fs::read_dir(&all) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = all.join(format!("run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        vidq::http::route_log::record_to(dir.clone());
        dir
    })
    .clone()
}

/// A loopback port free a moment ago (for child processes that need a fixed one).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether something accepts TCP connections on `addr` within a second.
pub fn answers(addr: &str) -> bool {
    addr.parse().is_ok_and(|addr| {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
    })
}

/// The server every test database lives on: `VIDQ_TEST_DATABASE_URL`, else the one on
/// 127.0.0.1:5432, else (nothing answers there, or it wants a password) a private server this run starts from the
/// installed PostgreSQL, as `vidq dev` does, and that stops once the test process is gone.
pub fn server_url() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("VIDQ_TEST_DATABASE_URL") {
            url
        } else if answers("127.0.0.1:5432") && lets_us_in(LOCAL_SERVER) {
            LOCAL_SERVER.to_owned()
        } else {
            private_server()
        }
    })
    .clone()
}

/// The server on the standard port, when it lets the `postgres` user in without a password.
const LOCAL_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Whether `url` accepts a connection (a packaged server may ask for a password on TCP).
fn lets_us_in(url: &'static str) -> bool {
    on_own_runtime(async move { db::pool::dedicated(url).await.is_ok() })
}

/// Runs `work` on a runtime of its own: the first caller may be inside a test's runtime or not.
fn on_own_runtime<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    })
    .join()
    .unwrap()
}

fn private_server() -> String {
    // In this checkout's target directory, which this user owns (never a path in /tmp that
    // someone else could have planted); kept between runs, so only the first pays initdb.
    let tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    // One run at a time owns the cluster: a second concurrent `cargo test` waits here rather
    // than restarting the server under the first.
    let lock = std::fs::File::create(tmp.join("test-postgres.lock")).unwrap();
    if lock.try_lock().is_err() {
        eprintln!("another test run holds the private PostgreSQL; waiting for it to finish");
        lock.lock().unwrap();
    }
    // Held (and so the cluster owned) until this process exits.
    std::mem::forget(lock);
    let dir = tmp.join("test-postgres");
    let started = on_own_runtime(async move {
        vidq::adapters::private_pg::PrivatePostgres::start(&dir).await
    })
    .unwrap_or_else(|e| {
        panic!(
            "nothing lets the tests in on 127.0.0.1:5432 and no private PostgreSQL could start: {e}"
        )
    });
    let url = db::pool::with_database(&started.url, "postgres").unwrap();
    started
        .stop_after_process(std::process::id())
        .expect("a watcher that stops the private PostgreSQL after the tests");
    url
}

/// Runs `program args...` until this test process exits, then kills it and removes
/// `scratch` (a detached shell in its own process group, so a Ctrl-C of the run does not
/// take the watcher down before it has cleaned up): for servers the tests share.
// The watcher is meant to outlive this process; nobody waits for it.
#[allow(clippy::zombie_processes)]
pub fn run_while_tests_run(program: &str, args: &[&str], scratch: &std::path::Path) {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"pid=$0; scratch=$1; shift; "$@" & child=$!; while kill -0 "$pid" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 1; done; kill "$child" 2>/dev/null; wait "$child"; rm -rf "$scratch""#)
        .arg(std::process::id().to_string())
        .arg(scratch)
        .arg(program)
        .args(args)
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
}

static TEMPLATE: OnceCell<String> = OnceCell::const_new();

/// A database with the current migrations applied, created once per migration set (its name
/// carries a hash of `migrations/`) and cloned for every test.
async fn template() -> &'static str {
    TEMPLATE
        .get_or_init(|| async {
            let name = format!("vidq_tpl_{}", migrations_hash());
            let url = db::pool::with_database(&server_url(), &name).unwrap();
            // Several test processes may start at once; creating under an advisory lock means
            // one creates and migrates while the others wait, then find it.
            let mut lock = maintenance().await;
            diesel::sql_query("SELECT pg_advisory_lock(7271014)")
                .execute(&mut lock)
                .await
                .unwrap();
            let created = db::provision::create_database_if_missing(&url)
                .await
                .unwrap();
            if created && let Err(err) = db::migrations::run_pending(&url).await {
                db::provision::drop_database(&url).await.unwrap();
                panic!("migrating the template failed: {err:?}");
            }
            drop_databases_of_dead_runs(&mut lock).await;
            diesel::sql_query("SELECT pg_advisory_unlock(7271014)")
                .execute(&mut lock)
                .await
                .unwrap();
            name
        })
        .await
}

/// Test databases are named `vidq_test_{pid}_{n}`. A run that was killed (Ctrl-C, a timeout)
/// never dropped its own; the next run drops those whose process is gone.
async fn drop_databases_of_dead_runs(conn: &mut diesel_async::AsyncPgConnection) {
    #[derive(QueryableByName)]
    struct Name {
        #[diesel(sql_type = diesel::sql_types::Text)]
        datname: String,
    }
    let names: Vec<Name> =
        diesel::sql_query("SELECT datname FROM pg_database WHERE datname LIKE 'vidq\\_test\\_%'")
            .load(conn)
            .await
            .unwrap();
    for Name { datname } in names {
        let pid = datname
            .split('_')
            .nth(2)
            .and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = diesel::sql_query(format!(
                "DROP DATABASE IF EXISTS \"{datname}\" WITH (FORCE)"
            ))
            .execute(conn)
            .await;
        }
    }
}

async fn maintenance() -> diesel_async::AsyncPgConnection {
    use diesel_async::AsyncConnection;
    let url = db::pool::with_database(&server_url(), "postgres").unwrap();
    diesel_async::AsyncPgConnection::establish(&url)
        .await
        .unwrap()
}

fn migrations_hash() -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<_> = walk(&dir);
    files.sort();
    let mut hasher = Sha256::new();
    for file in files {
        hasher.update(file.to_string_lossy().as_bytes());
        hasher.update(std::fs::read(&file).unwrap());
    }
    hex::encode(&hasher.finalize()[..6])
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// `vidq_test_{pid}_{n}`: the pid lets a later run find databases a killed run left behind.
pub fn test_database_name() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("vidq_test_{}_{n}", std::process::id())
}

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
    let config = StorageConfig {
        endpoint: Some(endpoint.parse().unwrap()),
        public_endpoint: None,
        bucket: TEST_BUCKET.to_owned(),
        region: "us-east-1".to_owned(),
        force_path_style: true,
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

/// A fresh database cloned from the template; dropped (WITH FORCE) when this is dropped.
pub struct TestDb {
    pub url: String,
}

impl TestDb {
    pub async fn new() -> Self {
        let template = template().await;
        let name = test_database_name();
        let url = db::pool::with_database(&server_url(), &name).unwrap();
        db::provision::create_database_from_template(&url, template)
            .await
            .unwrap();
        Self { url }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let url = self.url.clone();
        // Drop runs outside async; a short-lived runtime on its own thread does the DROP.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async { db::provision::drop_database(&url).await })
        })
        .join();
    }
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
            region: "us-east-1".to_owned(),
            force_path_style: true,
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
                    tus_store: options.tus.0.to_owned(),
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
            vidq::db::ingest::SWEEP_CHANNEL,
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

/// How PostgreSQL planned the prepared statements of one session whose text matches a pattern.
#[derive(QueryableByName, Debug)]
pub struct Plans {
    /// Statements that match.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub statements: i64,
    /// Executions run from a generic plan, over all of them.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub generic_plans: i64,
    /// Executions planned for their parameters' values.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub custom_plans: i64,
}

/// [`Plans`] of `conn`'s prepared statements matching the regular expression `pattern` (this
/// query itself left out).
pub async fn plans_of(conn: &mut diesel_async::AsyncPgConnection, pattern: &str) -> Plans {
    diesel::sql_query(
        "SELECT count(*) AS statements, coalesce(sum(generic_plans), 0)::int8 AS generic_plans,
                coalesce(sum(custom_plans), 0)::int8 AS custom_plans
           FROM pg_prepared_statements
          WHERE statement ~ $1 AND statement NOT LIKE '%pg_prepared_statements%'",
    )
    .bind::<diesel::sql_types::Text, _>(pattern)
    .get_result(conn)
    .await
    .unwrap()
}

/// Every user's row held `FOR UPDATE` by a transaction of its own until [`UsersHeld::let_go`]:
/// a READY finalize, whose first statement locks its uploader, waits meanwhile.
pub struct UsersHeld(
    bb8::PooledConnection<
        'static,
        diesel_async::pooled_connection::AsyncDieselConnectionManager<
            diesel_async::AsyncPgConnection,
        >,
    >,
);

impl UsersHeld {
    /// Holds the rows of every user of the database at `url`.
    pub async fn hold(url: &str) -> Self {
        let pool = db::connect(url, 1).await.unwrap();
        let mut conn = pool.get_owned().await.unwrap();
        for sql in ["BEGIN", "SELECT id FROM users FOR UPDATE"] {
            diesel::sql_query(sql).execute(&mut conn).await.unwrap();
        }
        Self(conn)
    }

    /// Ends the holding transaction.
    pub async fn let_go(mut self) {
        diesel::sql_query("ROLLBACK")
            .execute(&mut self.0)
            .await
            .unwrap();
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

/// `vidq ROLE` as a child process: a clean environment (PATH and `RUST_LOG=info` only),
/// stdout discarded, the log written to `log`, killed if the test drops it.
pub fn vidq_child(role: &str, log: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_vidq"));
    command
        .arg(role)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .env("VIDQ_ROUTE_LOG_DIR", routes_seen_dir())
        // Any free port: tests run side by side, and 1935 (the default) is one port.
        .env("VIDQ_RTMP_ADDR", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        // Appended: a role started again after a crash adds to what it said before.
        .stderr(
            std::fs::File::options()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .kill_on_drop(true);
    command
}
