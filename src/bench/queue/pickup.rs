//! The pickup measurement: idle workers, one enqueue every 50 ms through the confirm's own
//! transaction, timed from the enqueue's commit to the claim.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::workers::{Noop, start_workers};
use crate::bench::Scratch;
use crate::db;
use crate::domain::ids::{UploadId, UserId};
use crate::queue::line::Listeners;
use crate::queue::runner::ClaimObserver;
use crate::sync::Locked;

/// What the pickup test saw.
pub(super) struct Pickups {
    /// Commit of each enqueue to its claim.
    pub(super) latencies: Vec<Duration>,
    /// Claim statements run per job (the ones that found nothing included).
    pub(super) claims_per_job: f64,
    /// Jobs claimed before the enqueuer saw its COMMIT answered (counted as 0 ms): the NOTIFY
    /// goes out at the commit, and on two busy cores a listening worker can claim before the
    /// enqueuer's thread runs again.
    pub(super) early: usize,
}

/// Commit-to-claim latency with idle workers, one enqueue every 50 ms.
pub(super) async fn pickups(
    server: &str,
    workers: u32,
    slots: u32,
    listeners: Listeners,
    samples: usize,
) -> anyhow::Result<Pickups> {
    let scratch = Scratch::create(server, "pickup").await?;
    let pool = db::connect(&scratch.url, 1).await?;
    let (owner, _) = crate::app::users::create_user(&pool, "bench").await?;
    let claimed: Arc<Mutex<HashMap<i64, Instant>>> = Arc::default();
    let claims = Arc::new(AtomicUsize::new(0));
    let observer: ClaimObserver = {
        let (claimed, claims) = (claimed.clone(), claims.clone());
        Arc::new(move |job| {
            claims.fetch_add(1, Ordering::Relaxed);
            if let Some(job) = job {
                claimed.locked().insert(job, Instant::now());
            }
        })
    };
    let body = Arc::new(Noop {
        ready: AtomicUsize::new(0),
        target: usize::MAX,
        reached: Notify::new(),
    });
    let stop = CancellationToken::new();
    let handles = start_workers(
        &scratch.url,
        workers,
        slots,
        body,
        listeners,
        Some(observer),
        &stop,
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await; // all idle, one of them listening
    let claims_before = claims.load(Ordering::Relaxed);
    let committed = enqueue_apart(scratch.url.clone(), owner, samples).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let claims = claims.load(Ordering::Relaxed) - claims_before;
    stop.cancel();
    for handle in handles {
        let _ = handle.await;
    }
    let claimed = claimed.locked().clone();
    let latencies = committed
        .iter()
        .filter_map(|(job, at)| claimed.get(job).map(|c| c.saturating_duration_since(*at)))
        .collect::<Vec<_>>();
    let early = committed
        .iter()
        .filter(|(job, at)| claimed.get(job).is_some_and(|c| c < *at))
        .count();
    anyhow::ensure!(
        latencies.len() == samples,
        "only {} of {samples} jobs were claimed",
        latencies.len()
    );
    drop(pool);
    scratch.drop_now().await;
    Ok(Pickups {
        latencies,
        claims_per_job: claims as f64 / samples as f64,
        early,
    })
}

/// Enqueues `samples` jobs 50 ms apart; returns when each one's COMMIT was answered. The
/// enqueuer runs on a thread and runtime of its own: on the workers' runtime its task would
/// wait behind the ones the NOTIFY just woke, and read its COMMIT's answer late.
async fn enqueue_apart(
    url: String,
    owner: UserId,
    samples: usize,
) -> anyhow::Result<HashMap<i64, Instant>> {
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let pool = db::connect(&url, 1).await?;
            let mut conn = pool.get().await?;
            let mut committed = HashMap::new();
            for _ in 0..samples {
                let job = enqueue(&mut conn, owner).await?;
                committed.insert(job, Instant::now());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            anyhow::Ok(committed)
        })
    })
    .await?
}

/// A confirm without the S3 HEAD: a contract, then the application's own confirm
/// transaction ([`crate::app::uploads::accept`]). Returns the job's id.
async fn enqueue(conn: &mut diesel_async::AsyncPgConnection, owner: UserId) -> anyhow::Result<i64> {
    let upload = UploadId::new();
    let key = crate::domain::keys::original(upload);
    db::uploads::insert(
        conn,
        &db::uploads::NewUploadRow {
            id: upload,
            owner_id: owner,
            object_key: &key,
            filename: "bench.mp4",
            content_type: "video/mp4",
            declared_size: 1,
            expires_at: chrono::Utc::now(),
            checksum: None,
            tus_metadata: None,
        },
    )
    .await?;
    let accepted = crate::app::uploads::accept(conn, owner, upload, &key)
        .await?
        .context("the fresh contract was not confirmable")?;
    Ok(accepted.job_id)
}
