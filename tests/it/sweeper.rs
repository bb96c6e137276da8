//! The upload sweeper against real PostgreSQL and the in-process S3: the forward cursor
//! does not starve new rows behind failing ones, the file boundary refuses paths outside
//! the spool root with 0 PUTs, a missing spool file is rejected with its reason, an object
//! already PUT is confirmed without a second PUT, lapsed presigned contracts expire, and two
//! sweepers never PUT one row twice.

use std::collections::HashSet;
use std::time::Duration;

use diesel_async::RunQueryDsl;
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use vidq::adapters::spool::SpoolRoot;
use vidq::bench::sweeper::{FaultStore, register_pending};
use vidq::db;
use vidq::domain::ids::{UploadId, UserId};
use vidq::domain::keys;
use vidq::domain::sweep::{Backoff, BreakerSettings};
use vidq::sweeper::{Sweeper, SweeperSettings};

use crate::support::app::{TestApp, assert_error};
use vidq::app::UploadError;

const NODE: &str = "node-a";

struct Fixture {
    app: TestApp,
    owner: UserId,
    spool: tempfile::TempDir,
    store: FaultStore,
}

impl Fixture {
    async fn new() -> Self {
        let app = TestApp::spawn().await;
        let (owner, _) = vidq::app::users::create_user(&app.pool, "alice")
            .await
            .unwrap();
        let spool = tempfile::tempdir().unwrap();
        let store = FaultStore::new(app.storage.clone());
        Self {
            app,
            owner,
            spool,
            store,
        }
    }

    fn root(&self) -> SpoolRoot {
        SpoolRoot::open(self.spool.path()).unwrap()
    }

    fn sweeper(&self, settings: SweeperSettings) -> Sweeper<FaultStore> {
        Sweeper::start(
            self.app.pool.clone(),
            self.store.clone(),
            self.root(),
            settings,
            CancellationToken::new(),
        )
    }

    async fn pending(&self, count: usize, bytes: usize) -> Vec<UploadId> {
        register_pending(
            &self.app.pool,
            self.spool.path(),
            self.owner,
            NODE,
            count,
            bytes,
        )
        .await
        .unwrap()
    }

    /// One pending row whose spool path is written as given (no file is made).
    async fn pending_at(&self, spool_path: &str, size: i64) -> UploadId {
        let id = UploadId::new();
        let mut conn = self.app.pool.get().await.unwrap();
        vidq::bench::sweeper::insert_pending_at(&mut conn, id, self.owner, NODE, spool_path, size)
            .await
            .unwrap();
        id
    }

    async fn entry(&self, id: UploadId) -> db::uploads::sweep::LedgerEntry {
        let mut conn = self.app.pool.get().await.unwrap();
        db::uploads::sweep::entry(&mut conn, id).await.unwrap()
    }
}

fn settings() -> SweeperSettings {
    SweeperSettings {
        node_id: NODE.to_owned(),
        page: 128,
        queue: 4096,
        workers: 4,
        interval: Duration::from_millis(10),
        claim: Duration::from_secs(900),
        backoff: Backoff::default(),
        breaker: BreakerSettings {
            // Per-row failures are under test here, not the breaker.
            failures_to_open: u32::MAX,
            cool_down: Duration::from_secs(30),
        },
        orphans_every: None,
        orphan_grace: Duration::from_secs(3600),
        live_idle: Duration::from_secs(30),
        live_waiting_ttl: Duration::from_secs(86_400),
        live_grace: Duration::from_secs(10),
    }
}

/// Waits until the workers have dealt with every row queued so far.
async fn settle(sweeper: &Sweeper<FaultStore>) {
    let stats = sweeper.stats();
    for _ in 0..3000 {
        if stats.settled() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the sweeper's workers did not settle in 30 s: {stats:?}");
}

/// Runs rounds (each followed by the workers settling) until every id in `wanted` was
/// queued; the round in which the last one was.
async fn rounds_until_queued(
    sweeper: &mut Sweeper<FaultStore>,
    wanted: &[UploadId],
    limit: usize,
) -> Option<usize> {
    let wanted: HashSet<UploadId> = wanted.iter().copied().collect();
    let mut queued = HashSet::new();
    for round in 1..=limit {
        let r = sweeper.round().await.unwrap();
        assert_eq!(r.saturated, 0, "queue saturation");
        queued.extend(r.queued.into_iter().filter(|id| wanted.contains(id)));
        settle(sweeper).await;
        if queued.len() == wanted.len() {
            return Some(round);
        }
    }
    None
}

#[tokio::test]
async fn new_rows_behind_a_thousand_failing_rows_are_all_accepted_by_round_two() {
    let fx = Fixture::new().await;
    let failing = fx.pending(1000, 16).await;
    for id in &failing {
        fx.store.fail_puts_of(&keys::original(*id));
    }
    let mut sweeper = fx.sweeper(SweeperSettings {
        // Their backoff has not lapsed when the new rows arrive.
        backoff: Backoff {
            base: Duration::from_secs(600),
            cap: Duration::from_secs(600),
        },
        ..settings()
    });
    // The failing rows are tried once (8 rounds of 128) and keep their backoff on the row.
    assert_eq!(
        rounds_until_queued(&mut sweeper, &failing, 20).await,
        Some(8)
    );
    for id in [failing[0], failing[999]] {
        let entry = fx.entry(id).await;
        assert_eq!((entry.state.as_str(), entry.tries), ("pending", 1));
        assert!(entry.last_error.unwrap().contains("injected"));
    }

    let new = fx.pending(128, 16).await;
    let round = rounds_until_queued(&mut sweeper, &new, 10).await;
    assert!(round.is_some_and(|r| r <= 2), "accepted in round {round:?}");
    for id in &new {
        assert_eq!(fx.entry(*id).await.state, "confirmed");
    }
    assert_eq!(
        fx.app
            .count("SELECT count(*) AS n FROM uploads WHERE state = 'confirmed'")
            .await,
        128
    );
    sweeper.stop().await;
}

#[tokio::test]
async fn failing_rows_due_again_at_once_do_not_keep_the_cursor_from_new_rows() {
    // The worst case for a reader that starts at the front every round: the failing rows
    // are due again as soon as they fail. The forward cursor still reaches the new rows in
    // one pass over the table: ceil(1128 / 128) = 9 rounds.
    let fx = Fixture::new().await;
    let failing = fx.pending(1000, 16).await;
    for id in &failing {
        fx.store.fail_puts_of(&keys::original(*id));
    }
    let new = fx.pending(128, 16).await;
    let mut sweeper = fx.sweeper(SweeperSettings {
        backoff: Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(1),
        },
        ..settings()
    });
    let round = rounds_until_queued(&mut sweeper, &new, 30).await;
    assert_eq!(round, Some(9));
    // The failing rows were tried, and were due again: the next pass picks them up again.
    let r = sweeper.round().await.unwrap();
    assert!(r.queued.iter().all(|id| failing.contains(id)) && !r.queued.is_empty());
    sweeper.stop().await;
}

#[tokio::test]
async fn paths_outside_the_spool_root_are_rejected_and_never_put() {
    let fx = Fixture::new().await;
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.mp4");
    std::fs::write(&secret, b"0123456789").unwrap();
    std::os::unix::fs::symlink(&secret, fx.spool.path().join("link.mp4")).unwrap();
    std::fs::create_dir(fx.spool.path().join("sub")).unwrap();
    let absolute = fx.pending_at(secret.to_str().unwrap(), 10).await;
    let dotdot_path = format!(
        "sub/../../{}/secret.mp4",
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    let dotdot = fx.pending_at(&dotdot_path, 10).await;
    let symlink = fx.pending_at("link.mp4", 10).await;
    let missing = fx.pending_at("gone.mp4", 10).await;

    let mut sweeper = fx.sweeper(settings());
    let round = sweeper.round().await.unwrap();
    assert_eq!(round.queued.len(), 4);
    settle(&sweeper).await;

    for id in [absolute, dotdot, symlink] {
        let entry = fx.entry(id).await;
        assert_eq!(entry.state, "rejected");
        assert_eq!(
            entry.reject_reason.map(|r| r.as_str()),
            Some("outside_spool_root")
        );
    }
    let entry = fx.entry(missing).await;
    assert_eq!(
        (
            entry.state.as_str(),
            entry.reject_reason.map(|r| r.as_str())
        ),
        ("rejected", Some("spool_missing"))
    );
    assert_eq!(fx.store.total_puts(), 0, "nothing outside the root is PUT");
    for id in [absolute, dotdot, symlink, missing] {
        assert!(
            fx.app
                .storage
                .head(&keys::original(id))
                .await
                .unwrap()
                .is_none()
        );
    }
    // Rejected for good: never offered again.
    let again = sweeper.round().await.unwrap();
    assert!(again.queued.is_empty());
    sweeper.stop().await;
}

#[tokio::test]
async fn an_object_already_put_with_the_right_size_is_confirmed_without_a_second_put() {
    // A crash after the PUT and before the confirm: the object is there, the row pending.
    let fx = Fixture::new().await;
    let ids = fx.pending(2, 1000).await;
    let landed = ids[0];
    fx.app
        .storage
        .put_bytes(&keys::original(landed), vec![0x5a; 1000], "video/mp4")
        .await
        .unwrap();
    let mut sweeper = fx.sweeper(settings());
    sweeper.round().await.unwrap();
    settle(&sweeper).await;

    for id in &ids {
        assert_eq!(fx.entry(*id).await.state, "confirmed");
    }
    let puts = fx.store.puts();
    assert_eq!(puts.get(&keys::original(landed)), None);
    assert_eq!(puts.get(&keys::original(ids[1])), Some(&1));
    // The confirm's writes, once each: video, job, video.accepted.
    for (table, n) in [
        ("videos", 2),
        ("video_encoding_jobs", 2),
        ("notification_outbox WHERE event_type = 'video.accepted'", 2),
    ] {
        assert_eq!(
            fx.app
                .count(&format!("SELECT count(*) AS n FROM {table}"))
                .await,
            n,
            "{table}"
        );
    }
    // The spool copies are gone once the contracts are confirmed.
    assert!(!fx.spool.path().join(format!("{landed}.bin")).exists());
    sweeper.stop().await;
}

#[tokio::test]
async fn a_presigned_contract_past_its_expiry_is_expired_its_object_deleted_and_confirm_is_409() {
    let fx = Fixture::new().await;
    let key = fx.app.create_user("bob").await;
    let upload = fx.app.create_upload(&key, 64).await;
    assert!(
        fx.app
            .put_to(&upload, vec![1; 64])
            .await
            .status()
            .is_success()
    );
    let id = upload["upload_id"].as_str().unwrap().to_owned();
    let object_key = keys::original(UploadId(id.parse().unwrap()));
    assert!(fx.app.storage.head(&object_key).await.unwrap().is_some());
    // A second contract, not yet expired, is left alone.
    let live = fx.app.create_upload(&key, 64).await;

    backdate_expiry(&fx.app, &id).await;

    let sweeper = fx.sweeper(settings());
    assert_eq!(sweeper.expire().await.unwrap(), 1);
    assert_eq!(sweeper.expire().await.unwrap(), 0);
    let entry = fx.entry(id.parse().unwrap()).await;
    assert_eq!(entry.state, "expired");
    assert!(fx.app.storage.head(&object_key).await.unwrap().is_none());
    assert_error(
        fx.app.confirm(&key, &id).await,
        StatusCode::CONFLICT,
        "upload_closed",
    )
    .await;
    let live_id: UploadId = live["upload_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(fx.entry(live_id).await.state, "pending");
    sweeper.stop().await;
}

#[tokio::test]
async fn two_sweepers_on_the_same_rows_put_each_row_once() {
    let fx = Fixture::new().await;
    let ids = fx.pending(300, 256).await;
    let mut a = fx.sweeper(settings());
    let mut b = fx.sweeper(settings());
    let drive = async |s: &mut Sweeper<FaultStore>| {
        for _ in 0..10 {
            s.round().await.unwrap();
            tokio::task::yield_now().await;
        }
    };
    tokio::join!(drive(&mut a), drive(&mut b));
    settle(&a).await;
    settle(&b).await;
    let puts = fx.store.puts();
    assert_eq!(puts.len(), 300);
    assert!(puts.values().all(|&n| n == 1), "a row was PUT twice");
    let queued = |s: &Sweeper<FaultStore>| {
        std::sync::atomic::AtomicU64::load(&s.stats().queued, std::sync::atomic::Ordering::SeqCst)
    };
    let (qa, qb) = (queued(&a), queued(&b));
    assert_eq!(qa + qb, 300, "each row queued by one sweeper only");
    for id in &ids {
        assert_eq!(fx.entry(*id).await.state, "confirmed");
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_confirm_that_loses_to_expiry_after_its_head_answers_upload_closed() {
    // The confirm read the contract as pending and HEADed its object; the sweeper expired
    // it before the confirm's transaction. The CAS matches nothing: upload_closed, not a
    // video and not "already confirmed".
    let fx = Fixture::new().await;
    let (bob, key) = vidq::app::users::create_user(&fx.app.pool, "bob")
        .await
        .unwrap();
    let upload = fx.app.create_upload(key.reveal(), 8).await;
    assert!(
        fx.app
            .put_to(&upload, vec![1; 8])
            .await
            .status()
            .is_success()
    );
    let id: Uuid = upload["upload_id"].as_str().unwrap().parse().unwrap();
    backdate_expiry(&fx.app, &id.to_string()).await;
    let mut conn = fx.app.pool.get().await.unwrap();
    assert_eq!(
        db::uploads::sweep::expire_presigned(&mut conn, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let result =
        vidq::app::uploads::accept(&mut conn, bob, UploadId(id), &keys::original(UploadId(id)))
            .await;
    assert!(
        matches!(
            result,
            Err(vidq::app::AppError::Upload(UploadError::UploadClosed {
                state: vidq::domain::upload::UploadState::Expired
            }))
        ),
        "{result:?}"
    );
    assert_eq!(fx.app.count("SELECT count(*) AS n FROM videos").await, 0);
}

/// Moves a contract's expiry into the past, as if its client never came back.
async fn backdate_expiry(app: &TestApp, id: &str) {
    let mut conn = app.pool.get().await.unwrap();
    let changed = diesel::sql_query(format!(
        "UPDATE uploads SET expires_at = now() - interval '1 second' WHERE id = '{id}'"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    assert_eq!(changed, 1);
}
