//! The throughput measurement: worker processes drain a number of jobs while a backlog stays
//! queued behind them, on a scratch database of its own.

use super::ClaimCommit;
use crate::bench::Scratch;
use crate::db;
use crate::domain::ids::UserId;

/// One throughput run.
pub(super) struct Drained {
    /// Jobs per second.
    pub(super) rate: f64,
    /// READY finalizes per finalize transaction (1 when none met another).
    pub(super) per_commit: f64,
}

/// Drains `jobs` with `workers` slots (processes of `slots` each, claiming as `claims` says)
/// while `backlog` more stay queued.
pub(super) async fn throughput(
    server: &str,
    jobs: i64,
    (workers, slots, claims): (u32, u32, ClaimCommit),
    backlog: i64,
    owners: u32,
) -> anyhow::Result<Drained> {
    let scratch = Scratch::create(server, "queue").await?;
    let workers_url = match claims {
        ClaimCommit::Async => scratch.url.clone(),
        ClaimCommit::Sync => db::jobs::with_synchronous_claims(&scratch.url)?,
    };
    let pool = db::connect(&scratch.url, 1).await?;
    {
        let owners = bench_users(&pool, owners).await?;
        let mut conn = pool.get().await?;
        db::synthetic::backlog_of_owners(&mut conn, &owners, jobs + backlog).await?;
        db::bench::checkpoint(&mut conn).await?;
    }
    let target = usize::try_from(jobs)?;
    let drained =
        super::worker_process::drain_with_processes(&workers_url, workers, slots, target).await;
    drop(pool);
    scratch.drop_now().await;
    let (elapsed, per_commit) = drained?;
    Ok(Drained {
        rate: jobs as f64 / elapsed.as_secs_f64(),
        per_commit,
    })
}

/// Creates `n` users for a run's videos.
pub(super) async fn bench_users(pool: &db::DbPool, n: u32) -> anyhow::Result<Vec<UserId>> {
    let mut users = Vec::new();
    for i in 1..=n {
        let (user, _) = crate::app::users::create_user(pool, &format!("bench-{i}")).await?;
        users.push(user);
    }
    Ok(users)
}
