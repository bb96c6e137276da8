//! `vidq bench queue --sustained N`: does the queue stay as fast after a million jobs as it
//! was at the start? Jobs flow through a private PostgreSQL server with its default settings
//! (autovacuum on), started for the run and stopped after it: a producer keeps a backlog of
//! [`BACKLOG`] jobs queued while the workers drain N in all through the real claim and the
//! real fenced finalize, and every [`WINDOW`] jobs the table gets a row: jobs/s over the
//! window, and what autovacuum had done to the jobs table by then. Run twice, on two fresh
//! databases of the same server: with the queue and ledger tables' own autovacuum settings
//! (migration 000022), then without them (PostgreSQL's defaults).
//!
//! The claim is not timed on its own here: in a steady drain each slot's next claim goes out
//! ahead of its finalize in one flight (docs/architecture.md, Workers) and is not a round
//! trip of its own, so what the claim costs (the dead index entries it walks included) shows
//! in jobs/s.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Scratch;
use super::queue::{Noop, start_workers};
use crate::db;
use crate::queue::line::Listeners;

/// Jobs kept queued ahead of the workers.
pub const BACKLOG: i64 = 20_000;

/// Jobs per row of the table.
pub const WINDOW: usize = 100_000;

/// Jobs the producer adds at a time.
const BATCH: i64 = 5_000;

/// One row: a window of [`WINDOW`] jobs.
struct Window {
    rate: f64,
    dead_rows: i64,
    autovacuums: i64,
}

/// Runs the comparison: `total` jobs with the tables' settings, then without.
pub async fn run(total: i64, workers: u32, slots: u32) -> anyhow::Result<()> {
    anyhow::ensure!(
        total >= WINDOW as i64,
        "--sustained takes at least {WINDOW} jobs"
    );
    let dir = tempfile::tempdir()?;
    // As root the server runs as the `postgres` user, which must reach its cluster here.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    }
    let server = crate::adapters::private_pg::PrivatePostgres::start(&dir.path().join("pg"))
        .await
        .context("starting a private PostgreSQL server (its binaries must be installed)")?;
    println!(
        "vidq bench queue --sustained {total}: a private PostgreSQL with its default settings, \
         {} worker slot(s) as {} process(es), {BACKLOG} jobs kept queued, a row every {WINDOW} jobs\n",
        workers,
        workers.div_ceil(slots)
    );
    let mut results = Vec::new();
    for with_settings in [true, false] {
        let windows = drain(&server.url, total, workers, slots, with_settings).await;
        results.push((with_settings, windows));
    }
    server.stop().await;
    for (with_settings, windows) in results {
        let windows = windows?;
        println!(
            "{}:\n",
            if with_settings {
                "with the tables' autovacuum settings (migration 000022)"
            } else {
                "with PostgreSQL's defaults"
            }
        );
        println!("| jobs | jobs/s | dead rows in the jobs table | autovacuums of it so far |");
        println!("|---|---|---|---|");
        for (i, w) in windows.iter().enumerate() {
            println!(
                "| {}-{}k | {:.0} | {} | {} |",
                i * WINDOW / 1000,
                (i + 1) * WINDOW / 1000,
                w.rate,
                w.dead_rows,
                w.autovacuums
            );
        }
        if let (Some(first), Some(last)) = (windows.first(), windows.last()) {
            println!(
                "\nthe last {WINDOW} jobs ran at {:.0}% of the first {WINDOW}'s rate\n",
                100.0 * last.rate / first.rate
            );
        }
    }
    Ok(())
}

/// Drains `total` jobs on a fresh database of `server`, a row per window.
async fn drain(
    server: &str,
    total: i64,
    workers: u32,
    slots: u32,
    with_settings: bool,
) -> anyhow::Result<Vec<Window>> {
    let tag = if with_settings { "tuned" } else { "defaults" };
    let scratch = Scratch::create(server, &format!("sustained_{tag}")).await?;
    let pool = db::connect(&scratch.url, 2).await?;
    let (owner, _) = crate::app::users::create_user(&pool, "bench").await?;
    {
        let mut conn = pool.get().await?;
        if !with_settings {
            db::bench::reset_table_autovacuum(&mut conn).await?;
        }
        db::synthetic::backlog_of_owners(&mut conn, &[owner], BACKLOG).await?;
    }
    let body = Arc::new(Noop {
        ready: AtomicUsize::new(0),
        target: usize::try_from(total)?,
        reached: Notify::new(),
    });
    let stop = CancellationToken::new();
    // The producer: tops the backlog up as the workers drain it, until `total` were added.
    let producer = {
        let (pool, body, stop) = (pool.clone(), body.clone(), stop.clone());
        tokio::spawn(async move {
            let mut added = BACKLOG;
            while added < total && !stop.is_cancelled() {
                let done = body.ready.load(Ordering::Relaxed) as i64;
                if added - done < BACKLOG {
                    let n = BATCH.min(total - added);
                    let mut conn = pool.get().await?;
                    db::synthetic::more_jobs(&mut conn, &[owner], n).await?;
                    added += n;
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            anyhow::Ok(())
        })
    };
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
    let mut windows = Vec::new();
    let mut started = Instant::now();
    for boundary in (1..=total as usize / WINDOW).map(|n| n * WINDOW) {
        while body.ready.load(Ordering::Relaxed) < boundary {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed();
        started = Instant::now();
        let stats = {
            let mut conn = pool.get().await?;
            db::bench::jobs_table_stats(&mut conn).await?
        };
        windows.push(Window {
            rate: WINDOW as f64 / elapsed.as_secs_f64(),
            dead_rows: stats.dead_rows,
            autovacuums: stats.autovacuums,
        });
        eprintln!(
            "  {tag}: {boundary} jobs, {:.0} jobs/s over the last {WINDOW}",
            windows.last().map_or(0.0, |w| w.rate)
        );
    }
    stop.cancel();
    for handle in handles {
        let _ = handle.await;
    }
    producer.await??;
    drop(pool);
    scratch.drop_now().await;
    Ok(windows)
}
