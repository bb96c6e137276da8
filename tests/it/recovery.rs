//! The upload-recovery cases, each 5 times, with a real `vidq sweeper` process (killed
//! with SIGKILL where the case is a crash) and the real aws-sdk-s3 behind a fault proxy in
//! front of the in-process S3. Uploads arrive through the real API (`"via": "vidq"`, one
//! PUT); every repetition ends with `vidq reconcile` finding ledger and bucket equal.
//!
//! | case | fault | what must hold |
//! |---|---|---|
//! | crash before the PUT | PUT hangs unsent, SIGKILL | `pending`, no object; restart: one PUT, confirmed |
//! | crash after the PUT, before the CAS | PUT stored, answer held, SIGKILL | `pending`, object there; restart: found by HEAD, 0 PUTs, confirmed |
//! | ambiguous PUT | stored, answer lost | confirmed, one key, never a second |
//! | PUT fails, then recovers | 503s past the SDK's retries | the try and its error on the row, then confirmed |
//! | path outside the root | `..`, a symlink out | `rejected` `outside_spool_root`, 0 PUTs |
//! | spool file missing | file deleted | `rejected` `spool_missing`, in the API, 0 PUTs |

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::process::Child;

use vidq::db;
use vidq::domain::ids::{UploadId, UserId};

use crate::support::app::{SPOOL_NODE, TEST_BUCKET, TestApp};
use crate::support::process::vidq_child;
use crate::support::reconcile::{expect, reconcile};
use crate::support::s3_faults::{Fault, S3Faults};
use crate::support::tus::{bytes, wait_for_state};

const REPETITIONS: usize = 5;

struct Case {
    app: TestApp,
    key: String,
    faults: S3Faults,
    logs: tempfile::TempDir,
    spawned: usize,
}

impl Case {
    async fn new() -> Self {
        let app = TestApp::spawn().await;
        let key = app.create_user("alice").await;
        let faults = S3Faults::start(&app.s3.as_ref().unwrap().endpoint()).await;
        Self {
            app,
            key,
            faults,
            logs: tempfile::tempdir().unwrap(),
            spawned: 0,
        }
    }

    /// `vidq sweeper` of the API's node, through the fault proxy; claims last 2 s, so a
    /// killed sweeper's rows come back quickly.
    fn sweeper(&mut self) -> Child {
        self.sweeper_with(&[])
    }

    /// [`Case::sweeper`] with more (or overriding) settings.
    fn sweeper_with(&mut self, env: &[(&str, &str)]) -> Child {
        self.spawned += 1;
        let log = self
            .logs
            .path()
            .join(format!("sweeper-{}.log", self.spawned));
        let mut command = vidq_child("sweeper", &log);
        command
            .env("DATABASE_URL", &self.app.db.url)
            .env("VIDQ_S3_ENDPOINT", self.faults.endpoint())
            .env("VIDQ_S3_BUCKET", TEST_BUCKET)
            .env("VIDQ_S3_FORCE_PATH_STYLE", "true")
            .env("AWS_ACCESS_KEY_ID", "test-access")
            .env("AWS_SECRET_ACCESS_KEY", "test-secret")
            .env("VIDQ_SPOOL_DIR", self.app.spool.path())
            .env("VIDQ_NODE_ID", SPOOL_NODE)
            .env("VIDQ_SWEEPER_INTERVAL_MS", "100")
            .env("VIDQ_SWEEPER_CLAIM_SECS", "2")
            .env("VIDQ_SWEEPER_BREAKER_FAILURES", "1000");
        for (name, value) in env {
            command.env(name, value);
        }
        command.spawn().unwrap()
    }

    /// An upload through vidq, all bytes received (`pending`): its id and bytes.
    async fn pending_upload(&self, size: usize) -> (String, Vec<u8>) {
        let (id, url) = self.vidq_contract(size).await;
        (id, self.put_whole(&url, size).await)
    }

    /// `POST /v1/uploads` with `"via": "vidq"`: its id and where to PUT it.
    async fn vidq_contract(&self, size: usize) -> (String, String) {
        self.app.vidq_contract(&self.key, size).await
    }

    /// PUTs `size` bytes to `url`; returns them.
    async fn put_whole(&self, url: &str, size: usize) -> Vec<u8> {
        let file = bytes(size);
        let answer = self
            .app
            .http
            .put(url)
            .bearer_auth(&self.key)
            .body(file.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        file
    }

    async fn state(&self, id: &str) -> Value {
        self.app
            .get(&self.key, &format!("/v1/uploads/{id}"))
            .await
            .json()
            .await
            .unwrap()
    }

    async fn object(&self, id: &str) -> Option<Vec<u8>> {
        self.app
            .storage
            .get_bytes(&format!("originals/{id}"))
            .await
            .unwrap()
    }

    /// Waits until the proxy has seen `n` PUTs in all.
    async fn until_puts_seen(&self, n: u32) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while self.faults.puts_seen() < n {
            assert!(tokio::time::Instant::now() < deadline, "no PUT reached S3");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn until_puts_stored(&self, n: u32) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while self.faults.puts_stored() < n {
            assert!(tokio::time::Instant::now() < deadline, "no PUT was stored");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `vidq reconcile` (straight to S3, not through the proxy): no difference.
    async fn reconciled(&self) {
        expect(&reconcile(&self.app, &[]).await, 0);
    }

    /// Objects under `originals/`.
    async fn originals(&self) -> Vec<String> {
        self.app.storage.list_prefix("originals/").await.unwrap()
    }
}

async fn sigkill(mut child: Child) {
    child.start_kill().unwrap();
    let status = child.wait().await.unwrap();
    assert!(!status.success(), "the sweeper was killed, not stopped");
}

#[tokio::test]
async fn a_sweeper_killed_before_its_put_leaves_pending_and_no_object_and_the_next_one_lands_it() {
    let mut case = Case::new().await;
    for round in 0..REPETITIONS {
        let (id, file) = case.pending_upload(40_000 + round).await;
        let seen = case.faults.puts_seen();
        case.faults.plan(&[Fault::HangBeforeStore]);
        let sweeper = case.sweeper();
        case.until_puts_seen(seen + 1).await;
        sigkill(sweeper).await;
        assert_eq!(case.state(&id).await["state"], "pending");
        assert!(case.object(&id).await.is_none(), "nothing reached S3");

        let sweeper = case.sweeper();
        let status = wait_for_state(&case.app, &case.key, &id, "confirmed").await;
        assert!(status["video_id"].is_string());
        assert_eq!(case.object(&id).await.unwrap(), file);
        sigkill(sweeper).await;
        case.reconciled().await;
    }
    assert_eq!(case.originals().await.len(), REPETITIONS);
}

#[tokio::test]
async fn a_sweeper_killed_after_its_put_and_before_the_cas_is_finished_by_head_without_a_second_put()
 {
    let mut case = Case::new().await;
    for round in 0..REPETITIONS {
        let (id, file) = case.pending_upload(40_000 + round).await;
        let stored = case.faults.puts_stored();
        case.faults.plan(&[Fault::HangAfterStore]);
        let sweeper = case.sweeper();
        case.until_puts_stored(stored + 1).await;
        sigkill(sweeper).await;
        assert_eq!(case.state(&id).await["state"], "pending");
        assert_eq!(case.object(&id).await.unwrap(), file, "the PUT landed");

        let seen = case.faults.puts_seen();
        let sweeper = case.sweeper();
        wait_for_state(&case.app, &case.key, &id, "confirmed").await;
        assert_eq!(
            case.faults.puts_seen(),
            seen,
            "found by HEAD: no second PUT"
        );
        sigkill(sweeper).await;
        case.reconciled().await;
    }
    assert_eq!(case.originals().await.len(), REPETITIONS);
}

#[tokio::test]
async fn an_ambiguous_put_stored_with_its_answer_lost_is_confirmed_under_the_one_key() {
    let mut case = Case::new().await;
    let sweeper = case.sweeper();
    for round in 0..REPETITIONS {
        case.faults.plan(&[Fault::LoseResponse]);
        let stored = case.faults.puts_stored();
        let (id, file) = case.pending_upload(40_000 + round).await;
        wait_for_state(&case.app, &case.key, &id, "confirmed").await;
        assert!(
            case.faults.puts_stored() > stored,
            "the lost answer's PUT was stored"
        );
        assert_eq!(case.object(&id).await.unwrap(), file);
        case.reconciled().await;
    }
    assert_eq!(
        case.originals().await.len(),
        REPETITIONS,
        "one key per upload, never a second"
    );
    sigkill(sweeper).await;
}

#[tokio::test]
async fn a_put_that_fails_is_retried_from_the_ledger_and_lands_when_s3_recovers() {
    let mut case = Case::new().await;
    let sweeper = case.sweeper();
    for round in 0..REPETITIONS {
        // More 503s than the SDK's own attempts (3, plus a resend of a request the
        // connection pool saw cut): at least one try fails and the row backs off.
        case.faults.plan(&[Fault::Unavailable; 6]);
        let (id, file) = case.pending_upload(40_000 + round).await;
        wait_for_state(&case.app, &case.key, &id, "confirmed").await;
        let mut conn = case.app.pool.get().await.unwrap();
        let entry = db::uploads::sweep::entry(&mut conn, id.parse().unwrap())
            .await
            .unwrap();
        assert!(
            entry.tries >= 1,
            "the failed tries are on the row: {entry:?}"
        );
        assert!(
            entry
                .last_error
                .as_deref()
                .unwrap_or_default()
                .contains("PutObject"),
            "{entry:?}"
        );
        assert_eq!(case.object(&id).await.unwrap(), file);
        case.reconciled().await;
    }
    sigkill(sweeper).await;
}

/// A `pending` row whose spool path is `raw` (no file is made for it).
async fn pending_at(app: &TestApp, owner: UserId, raw: &str) -> UploadId {
    let id = UploadId::new();
    let mut conn = app.pool.get().await.unwrap();
    vidq::bench::sweeper::insert_pending_at(&mut conn, id, owner, SPOOL_NODE, raw, 5)
        .await
        .unwrap();
    id
}

#[tokio::test]
async fn paths_outside_the_spool_root_are_rejected_and_never_put() {
    let mut case = Case::new().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"12345").unwrap();
    let (owner, _) = vidq::app::users::create_user(&case.app.pool, "bob")
        .await
        .unwrap();
    let sweeper = case.sweeper();
    for round in 0..REPETITIONS {
        let link = format!("uploads/link-{round}");
        std::os::unix::fs::symlink(
            outside.path().join("secret"),
            case.app.spool.path().join(&link),
        )
        .unwrap();
        let ids = [
            pending_at(&case.app, owner, &link).await,
            pending_at(&case.app, owner, "../../secret").await,
            pending_at(
                &case.app,
                owner,
                &outside.path().join("secret").display().to_string(),
            )
            .await,
        ];
        for id in ids {
            let entry = wait_rejected(&case.app, id).await;
            assert_eq!(
                entry.reject_reason.map(|r| r.as_str()),
                Some("outside_spool_root")
            );
        }
        case.reconciled().await;
    }
    assert_eq!(
        case.faults.puts_seen(),
        0,
        "nothing outside the root was PUT"
    );
    assert!(case.originals().await.is_empty());
    sigkill(sweeper).await;
}

#[tokio::test]
async fn a_missing_spool_file_is_rejected_with_its_reason_in_the_api() {
    let mut case = Case::new().await;
    let sweeper = case.sweeper();
    for round in 0..REPETITIONS {
        // The file goes before the sweeper sees the row: hold the sweeper off with a claim.
        let (id, _) = case.pending_upload_claimed(40_000 + round).await;
        std::fs::remove_file(case.app.spool.path().join("uploads").join(&id)).unwrap();
        release(&case.app, &id).await;
        let status = wait_for_state(&case.app, &case.key, &id, "rejected").await;
        assert_eq!(status["reject_reason"], "spool_missing");
        assert!(status["video_id"].is_null());
        case.reconciled().await;
    }
    assert_eq!(case.faults.puts_seen(), 0);
    sigkill(sweeper).await;
}

impl Case {
    /// Like [`Case::pending_upload`], with the row claimed an hour ahead (before its bytes
    /// arrive) so no sweeper takes it until [`release`].
    async fn pending_upload_claimed(&self, size: usize) -> (String, Vec<u8>) {
        let (id, url) = self.vidq_contract(size).await;
        self.app
            .count(&format!(
                "WITH x AS (UPDATE uploads SET claimed_until = now() + interval '1 hour'
                             WHERE id = '{id}' RETURNING 1) SELECT count(*) AS n FROM x"
            ))
            .await;
        (id.clone(), self.put_whole(&url, size).await)
    }
}

async fn release(app: &TestApp, id: &str) {
    app.count(&format!(
        "WITH x AS (UPDATE uploads SET claimed_until = NULL WHERE id = '{id}' RETURNING 1)
         SELECT count(*) AS n FROM x"
    ))
    .await;
}

async fn wait_rejected(app: &TestApp, id: UploadId) -> db::uploads::sweep::LedgerEntry {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut conn = app.pool.get().await.unwrap();
        let entry = db::uploads::sweep::entry(&mut conn, id).await.unwrap();
        if entry.state == "rejected" {
            return entry;
        }
        assert!(tokio::time::Instant::now() < deadline, "{entry:?}");
        drop(conn);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The in-process sweeper's S3 client, through the fault proxy.
async fn storage_through(faults: &S3Faults) -> vidq::adapters::storage::Storage {
    crate::support::app::storage_client(&faults.endpoint(), Default::default()).await
}

#[tokio::test]
async fn s3_down_for_30_seconds_under_200_pending_uploads_opens_the_breaker_and_loses_nothing() {
    use std::sync::atomic::Ordering;
    let case = Case::new().await;
    let (owner, _) = vidq::app::users::create_user(&case.app.pool, "bob")
        .await
        .unwrap();
    let ids = vidq::bench::sweeper::register_pending(
        &case.app.pool,
        case.app.spool.path(),
        owner,
        SPOOL_NODE,
        200,
        4096,
    )
    .await
    .unwrap();
    case.faults.set_down(true);
    let mut settings = crate::support::sweeper::woken_sweeper();
    settings.interval = Duration::from_millis(200);
    settings.workers = 4;
    settings.breaker = vidq::domain::sweep::BreakerSettings {
        failures_to_open: 5,
        cool_down: Duration::from_secs(2),
    };
    let stats = case
        .app
        .start_sweeper(storage_through(&case.faults).await, settings)
        .await;
    // The outage itself: S3 stays down 30 s (the scenario) while the sweeper works on.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let confirmed = "SELECT count(*) AS n FROM uploads WHERE state = 'confirmed'";
    assert_eq!(case.app.count(confirmed).await, 0, "S3 was down");
    assert!(
        stats.breaker_transitions.load(Ordering::SeqCst) >= 1,
        "the breaker opened"
    );
    let held = stats.held_by_breaker.load(Ordering::SeqCst);
    let failed = stats.failed.load(Ordering::SeqCst);
    assert!(
        held > 0,
        "rows were held back, not tried, while it was open"
    );

    case.faults.set_down(false);
    let back = tokio::time::Instant::now();
    crate::support::wait::wait_for_count(&case.app, confirmed, 200, Duration::from_secs(120)).await;
    let took = back.elapsed();
    eprintln!(
        "S3 down 30 s with 200 pending: {failed} failed tries and {held} rows held by the \
         breaker while down; all 200 confirmed {:.2} s after S3 came back",
        took.as_secs_f64()
    );
    assert_eq!(
        case.app
            .count("SELECT count(*) AS n FROM uploads WHERE state <> 'confirmed'")
            .await,
        0,
        "nothing rejected, nothing lost"
    );
    assert_eq!(case.originals().await.len(), ids.len());
    case.reconciled().await;
}

#[tokio::test]
async fn puts_s3_refuses_back_off_their_rows_without_opening_the_breaker_for_the_others() {
    use std::sync::atomic::Ordering;
    let case = Case::new().await;
    let (owner, _) = vidq::app::users::create_user(&case.app.pool, "bob")
        .await
        .unwrap();
    // More refusals in a row than it takes 503s to open the breaker.
    case.faults.plan(&[Fault::Refused; 8]);
    vidq::bench::sweeper::register_pending(
        &case.app.pool,
        case.app.spool.path(),
        owner,
        SPOOL_NODE,
        20,
        4096,
    )
    .await
    .unwrap();
    let mut settings = crate::support::sweeper::woken_sweeper();
    settings.interval = Duration::from_millis(100);
    settings.breaker = vidq::domain::sweep::BreakerSettings {
        failures_to_open: 5,
        cool_down: Duration::from_secs(600),
    };
    let stats = case
        .app
        .start_sweeper(storage_through(&case.faults).await, settings)
        .await;
    crate::support::wait::wait_for_count(
        &case.app,
        "SELECT count(*) AS n FROM uploads WHERE state = 'confirmed'",
        20,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        stats.failed.load(Ordering::SeqCst),
        8,
        "each refusal is a failed try"
    );
    assert_eq!(
        stats.breaker_transitions.load(Ordering::SeqCst),
        0,
        "refusals are not an outage: the breaker never opened"
    );
    assert_eq!(stats.held_by_breaker.load(Ordering::SeqCst), 0);
    case.reconciled().await;
}

/// `GET` of the sweeper's health listener: status and body.
async fn probe(port: u16, path: &str) -> (u16, String) {
    match reqwest::get(format!("http://127.0.0.1:{port}{path}")).await {
        Ok(answer) => (answer.status().as_u16(), answer.text().await.unwrap()),
        Err(_) => (0, String::new()),
    }
}

async fn until_metric(port: u16, line: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = probe(port, "/metrics").await;
        if metrics.lines().any(|l| l == line) {
            return metrics;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never saw {line:?} in:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn the_sweepers_metrics_show_its_breaker_open_while_s3_is_down_and_closed_after() {
    let mut case = Case::new().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    case.faults.set_down(true);
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(case.pending_upload(10_000 + n).await.0);
    }
    let sweeper = case.sweeper_with(&[
        ("VIDQ_HEALTH_LISTEN", &format!("127.0.0.1:{port}")),
        ("VIDQ_SWEEPER_BREAKER_FAILURES", "3"),
        ("VIDQ_SWEEPER_BREAKER_COOLDOWN_MS", "500"),
    ]);
    let open = until_metric(port, "vidq_sweeper_breaker_state{state=\"open\"} 1").await;
    assert!(
        open.contains("vidq_sweeper_breaker_state{state=\"closed\"} 0"),
        "{open}"
    );
    assert!(
        open.contains("# TYPE vidq_sweeper_rows_total counter"),
        "{open}"
    );
    let (status, body) = probe(port, "/healthz").await;
    assert_eq!(status, 200, "S3 down is not the sweeper down: {body}");

    case.faults.set_down(false);
    for id in &ids {
        wait_for_state(&case.app, &case.key, id, "confirmed").await;
    }
    let closed = until_metric(port, "vidq_sweeper_breaker_state{state=\"closed\"} 1").await;
    assert!(
        closed.contains("vidq_sweeper_rows_total{outcome=\"confirmed\"} 6"),
        "{closed}"
    );
    sigkill(sweeper).await;
    case.reconciled().await;
}
