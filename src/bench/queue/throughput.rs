//! The throughput measurement: drain a number of jobs while a backlog stays queued behind
//! them, on a scratch database of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::workers::{Noop, start_workers};
use crate::bench::Scratch;
use crate::db;
use crate::queue::line::Listeners;

/// One throughput run.
pub(super) struct Drained {
    /// Jobs per second.
    pub(super) rate: f64,
    /// READY finalizes per finalize transaction (1 when none met another).
    pub(super) per_commit: f64,
}

/// Drains `jobs` with `workers` slots (processes of `slots` each) while `backlog` more stay
/// queued.
pub(super) async fn throughput(
    server: &str,
    jobs: i64,
    workers: u32,
    slots: u32,
    backlog: i64,
    owners: u32,
) -> anyhow::Result<Drained> {
    let scratch = Scratch::create(server, "queue").await?;
    let pool = db::connect(&scratch.url, 1).await?;
    {
        let owners = bench_users(&pool, owners).await?;
        let mut conn = pool.get().await?;
        db::synthetic::backlog_of_owners(&mut conn, &owners, jobs + backlog).await?;
        db::bench::checkpoint(&mut conn).await?;
    }
    let body = Arc::new(Noop {
        ready: AtomicUsize::new(0),
        target: usize::try_from(jobs)?,
        reached: Notify::new(),
    });
    let stop = CancellationToken::new();
    let batches = &crate::metrics::FINALIZE_BATCH_SIZE;
    let (batches_before, batched_before) = (batches.get_sample_count(), batches.get_sample_sum());
    let started = Instant::now();
    let handles = start_workers(
        &scratch.url,
        workers,
        slots,
        body.clone(),
        Listeners::HeadOfLine,
        None,
        &stop,
    )
    .await?;
    body.reached.notified().await;
    let elapsed = started.elapsed();
    stop.cancel();
    for handle in handles {
        let _ = handle.await;
    }
    let ready = body.ready.load(Ordering::SeqCst) as f64;
    let batched = batches.get_sample_sum() - batched_before;
    let transactions = (batches.get_sample_count() - batches_before) as f64 + (ready - batched);
    drop(pool);
    scratch.drop_now().await;
    Ok(Drained {
        rate: jobs as f64 / elapsed.as_secs_f64(),
        per_commit: ready / transactions.max(1.0),
    })
}

/// Creates `n` users for a run's videos.
pub(super) async fn bench_users(pool: &db::DbPool, n: u32) -> anyhow::Result<Vec<uuid::Uuid>> {
    let mut users = Vec::new();
    for i in 1..=n {
        let (user, _) = crate::app::users::create_user(pool, &format!("bench-{i}")).await?;
        users.push(user.0);
    }
    Ok(users)
}
