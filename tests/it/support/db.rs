//! Test databases: the PostgreSQL server the run uses (`VIDQ_TEST_DATABASE_URL`, the one on
//! 127.0.0.1:5432, or a private one), a template with the migrations applied once per
//! migration set, a fresh clone of it per test (`TestDb`, dropped with the test), and probes
//! of server state (prepared-statement plans, rows held by another transaction).

use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use vidq::db;

use crate::support::process::answers;

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
