//! `vidq bench queue`: how fast the queue moves jobs with no encoding in the way.
//!
//! Throughput: W worker slots as processes of S slots each (`vidq bench queue-worker`: the
//! worker's own runner, settings, heartbeats and presence, a pool of 2 connections, a job
//! body that does nothing) drain N jobs through the real claim statement and the real fenced
//! READY finalize (video update, outbox row, attempt ledger), while a backlog of B jobs stays
//! queued behind them; once with the claim committed as vidq commits it (without waiting for
//! its WAL flush) and once with the flush. Pickup: W idle worker slots in the same layouts,
//! as runners inside this process (which times their claims), one enqueue every 50 ms
//! through the confirm's own transaction, timed from the enqueue's commit to the claim.
//!
//! In the same rounds: the SQL-only ceilings (pgbench running the same statements, one job
//! and up to 8 jobs a transaction) when pgbench is installed, and a peer queue,
//! graphile-worker, draining the same number of jobs with the same worker count and backlog
//! when Node.js and its package are installed: with no-op jobs and with jobs that write what
//! vidq's finalize writes (the video READY and its event), each at the peer's defaults and at
//! its documented throughput settings.
//!
//! This file holds the arguments and the order of the runs; the worker processes are in
//! `worker_process`, the in-process runners of the pickup test in `workers`, the two
//! measurements in `throughput` and `pickup`, the ceilings and the peer in `compare`, and the
//! table lines in `table`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::queue::line::Listeners;
use compare::{CeilingShape, Measured, PeerRun, ceiling, peer};
use pickup::{Pickups, pickups};
use table::{Row, print_pickups, print_row};
use throughput::throughput;

mod compare;
mod pickup;
mod table;
mod throughput;
mod worker_process;
mod workers;

pub use worker_process::{QueueWorkerArgs, run_child};
pub(super) use workers::{Noop, start_workers};

/// `vidq bench queue`.
#[derive(Debug, Args)]
pub struct QueueBenchArgs {
    /// Jobs each throughput measurement drains.
    #[arg(long, default_value_t = 20_000)]
    pub jobs: i64,
    /// Worker counts to measure (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2,8")]
    pub workers: Vec<u32>,
    /// Slots per worker process (comma-separated; each is measured at every worker count,
    /// capped at it, for throughput and for pickup). 1 runs each worker as a process of its
    /// own; 8 runs 8 workers as one process with 8 slots, as graphile-worker's runner with
    /// concurrency 8 does. The finalizes of one process's slots commit together when they
    /// meet.
    #[arg(long, value_delimiter = ',', default_value = "1,8",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub slots: Vec<u32>,
    /// Jobs left queued behind the drained ones (comma-separated; each is measured).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub backlog: Vec<i64>,
    /// How vidq's claim commits (comma-separated; each is measured): `async`, as vidq runs
    /// (the claim alone without waiting for its WAL flush), and `sync`, with the flush, as
    /// every commit of the peer waits for it.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "async,sync")]
    pub claims: Vec<ClaimCommit>,
    /// Rounds per worker count: each round measures, for every backlog, the ceilings, vidq
    /// and the peer one after another, so each ratio compares runs made minutes apart; the
    /// table shows medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Pickup samples per worker count, layout and listening mode (one enqueue every 50 ms);
    /// 0 skips the pickup test.
    #[arg(long, default_value_t = 200)]
    pub pickups: usize,
    /// Skip the SQL-only ceilings (pgbench running the claim and the READY finalize, one job
    /// and up to 8 jobs a transaction; see `db::queue_ceiling`). They run whenever `pgbench`
    /// is on the PATH; without it their columns say why not.
    #[arg(long)]
    pub no_ceiling: bool,
    /// The peer queue's drain script (graphile-worker, run with `node`; its package is
    /// installed by `npm ci --prefix scripts/peers/graphile-worker`), drained in each round
    /// right after vidq with the same jobs, workers and backlog.
    #[arg(long, default_value = "scripts/peers/graphile-worker/drain.mjs")]
    pub peer: PathBuf,
    /// Skip the peer queue.
    #[arg(long)]
    pub no_peer: bool,
    /// Users the jobs' videos are dealt to in turn. 1 is one busy tenant: every finalize
    /// then takes a key-share lock on the same user row while the others hold theirs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub owners: u32,
    /// Instead of the comparisons: drain this many jobs (a million, say) through a private
    /// PostgreSQL server with its default settings while a backlog stays queued, with the
    /// tables' own autovacuum settings and then without, and report jobs/s and the jobs
    /// table's dead rows every 100,000 jobs (at the first `--workers` and `--slots`).
    #[arg(long, value_name = "JOBS")]
    pub sustained: Option<i64>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// How vidq's claim commits in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClaimCommit {
    /// Without waiting for its WAL flush, as vidq runs.
    Async,
    /// With its WAL flush (`vidq.claim_synchronous_commit` on).
    Sync,
}

impl ClaimCommit {
    pub(super) fn name(self) -> &'static str {
        match self {
            ClaimCommit::Async => "async",
            ClaimCommit::Sync => "sync",
        }
    }
}

/// The slots per process measured at `workers` workers: `slots` capped at `workers`, each
/// once, in the order given.
fn layouts(slots: &[u32], workers: u32) -> Vec<u32> {
    let mut layouts: Vec<u32> = Vec::new();
    for slots in slots.iter().map(|&s| s.clamp(1, workers.max(1))) {
        if !layouts.contains(&slots) {
            layouts.push(slots);
        }
    }
    layouts
}

/// `workers` slots as processes of `slots`: `8x1` is eight processes of one slot.
fn layout_name(workers: u32, slots: u32) -> String {
    format!("{}x{slots}", workers.div_ceil(slots))
}

/// Runs the benchmark and prints its table.
pub async fn run(args: QueueBenchArgs) -> anyhow::Result<()> {
    if let Some(total) = args.sustained {
        let workers = args.workers.first().copied().unwrap_or(2);
        let slots = args.slots.first().copied().unwrap_or(1);
        return super::sustained::run(total, workers, slots).await;
    }
    println!(
        "vidq bench queue: {} jobs per measurement, no-op job body, real claim + fenced finalize, \
         videos of {} user(s), medians of {} rounds; processes: worker processes x slots each",
        args.jobs, args.owners, args.rounds
    );
    println!();
    let mut heading = format!(
        "{:>7} | {:>9} | {:>5} | {:>8} | {:>10}",
        "workers", "processes", "claim", "backlog", "jobs/s"
    );
    for shape in CeilingShape::ALL {
        heading.push_str(&format!(" | {:>13} | {:>8}", shape.heading(), "ratio"));
    }
    for run in PeerRun::ALL {
        heading.push_str(&format!(" | {:>14} | {:>9}", run.heading(), "vidq/peer"));
    }
    println!("{heading} | per-round ratios");
    for &workers in &args.workers {
        // Every layout, each with every way of committing the claim.
        let variants: Vec<(u32, ClaimCommit)> = layouts(&args.slots, workers)
            .into_iter()
            .flat_map(|slots| args.claims.iter().map(move |&claims| (slots, claims)))
            .collect();
        let mut rows: Vec<Vec<Row>> = args
            .backlog
            .iter()
            .map(|_| variants.iter().map(|_| Row::default()).collect())
            .collect();
        let mut ceilings: Vec<[Measured; 2]> =
            args.backlog.iter().map(|_| Default::default()).collect();
        let mut peers: Vec<[Measured; 4]> =
            args.backlog.iter().map(|_| Default::default()).collect();
        for _ in 0..args.rounds.max(1) {
            let each_backlog = rows.iter_mut().zip(&mut ceilings).zip(&mut peers);
            for (((rows, ceilings), peers), &backlog) in each_backlog.zip(&args.backlog) {
                let server = &args.server.database_url;
                let (jobs, owners) = (args.jobs, args.owners);
                let mut measured = [None, None];
                for (i, shape) in CeilingShape::ALL.into_iter().enumerate() {
                    if args.no_ceiling {
                        ceilings[i].why_not = Some("--no-ceiling".to_owned());
                        continue;
                    }
                    match ceiling(server, shape, jobs, workers, backlog, owners).await {
                        Ok(c) => {
                            ceilings[i].rates.push(c);
                            measured[i] = Some(c);
                        }
                        Err(why) => ceilings[i].why_not = Some(why),
                    }
                }
                let mut rates = Vec::new();
                for (row, &(slots, claims)) in rows.iter_mut().zip(&variants) {
                    let shape = (workers, slots, claims);
                    let run = throughput(server, jobs, shape, backlog, owners)
                        .await
                        .context("throughput run")?;
                    let rate = run.rate;
                    row.rates.push(rate);
                    row.per_commit.push(run.per_commit);
                    for (to_ceiling, c) in row.to_ceiling.iter_mut().zip(measured) {
                        to_ceiling.extend(c.map(|c| rate / c));
                    }
                    rates.push(rate);
                }
                if args.no_peer {
                    continue;
                }
                // Right after vidq's runs, so that they meet the same minutes of the machine.
                for (i, run) in PeerRun::ALL.into_iter().enumerate() {
                    match peer(server, &args.peer, run, jobs, workers, backlog, owners).await {
                        Ok(p) => {
                            peers[i].rates.push(p);
                            for (row, rate) in rows.iter_mut().zip(&rates) {
                                row.to_peer[i].push(rate / p);
                            }
                        }
                        Err(why) => peers[i].why_not = Some(why),
                    }
                }
            }
        }
        let each_backlog = rows.iter().zip(&ceilings).zip(&peers);
        for (((rows, ceilings), peers), &backlog) in each_backlog.zip(&args.backlog) {
            for (row, &(slots, claims)) in rows.iter().zip(&variants) {
                print_row((workers, slots, claims), backlog, row, ceilings, peers);
            }
        }
    }
    if args.pickups > 0 {
        println!();
        println!(
            "pickup: commit of the enqueue -> claim, idle workers, one enqueue every 50 ms, {} samples \
             a round, medians of {} rounds; early: claimed before the enqueuer saw its commit \
             answered (counted as 0 ms)",
            args.pickups, args.rounds
        );
        println!(
            "{:>7} | {:>9} | {:<12} | {:>6} | {:>6} | {:>6} | {:>6} | {:>10} | {:>5} | per-round p99",
            "workers",
            "processes",
            "listening",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "claims/job",
            "early"
        );
        for &workers in &args.workers {
            // A process of several slots has one idle line, so "every idle" is "head of
            // line" when one process holds every slot.
            let runs: Vec<(u32, Listeners, &str)> = layouts(&args.slots, workers)
                .into_iter()
                .flat_map(|slots| {
                    let every =
                        (slots < workers).then_some((slots, Listeners::EveryIdle, "every idle"));
                    std::iter::once((slots, Listeners::HeadOfLine, "head of line")).chain(every)
                })
                .collect();
            let mut rounds: Vec<Vec<Pickups>> = runs.iter().map(|_| Vec::new()).collect();
            // Alternating them in each round exposes each to the same moments of the VM.
            for _ in 0..args.rounds.max(1) {
                for (i, &(slots, mode, _)) in runs.iter().enumerate() {
                    let run = pickups(
                        &args.server.database_url,
                        workers,
                        slots,
                        mode,
                        args.pickups,
                    )
                    .await
                    .context("pickup run")?;
                    rounds[i].push(run);
                }
            }
            for (runs, &(slots, _, name)) in rounds.iter().zip(&runs) {
                print_pickups(workers, &layout_name(workers, slots), name, runs);
            }
        }
    }
    Ok(())
}
