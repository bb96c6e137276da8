//! `vidq bench api`: the API's throughput with many keep-alive clients, against a `vidq api`
//! child process on loopback.
//!
//! Confirm: presigned uploads are created and their bytes PUT to the in-process S3 first,
//! outside the timed part; then C clients confirm them all, each over its own keep-alive
//! connection. Status reads: the same C clients `GET /v1/videos/{id}` for a fixed time,
//! spread over `--read-videos` (1,000) READY videos, then all of one video (a hot row, its own
//! row in the table: one row read by everyone is the cheap case, not the typical one). Beside them, in the same round, pgbench runs the confirm transaction's own
//! statements ([`crate::db::bench::confirm_pgbench`]) at the API's pool size: the most
//! PostgreSQL does with them, with nothing of HTTP, S3 or the key lookup in the way.
//!
//! Confirms paced: with 64 clients each sending its next confirm as soon as the last is
//! answered, the mean latency is 64 over the rate (Little's law), whatever the server does.
//! So the last batch setting also confirms at a fixed offered rate, a share of the round's
//! pgbench ceiling (`--paced-share`), over the same connections: confirm i is due at
//! i / rate, and a confirm that finds its connection still busy at that moment counts its
//! latency from then, so the time it waited behind a slow answer is counted, not left out.
//!
//! The clients are hyper's bare HTTP/1.1 connections (no pool, no redirects, no
//! decompression), so as little as possible of the two cores goes to the load itself.
//!
//! This file holds the arguments and the table; a round's steps are in `round`, the clients
//! in `load`, the pgbench yardstick in `ceiling`, and the read of the API's own batch sizes
//! in `scrape`.

use std::time::Duration;

use anyhow::{Context, ensure};
use clap::Args;

use super::stats::{median, ms, percentile};
use round::{Paced, Rate, Round, round};

mod ceiling;
mod load;
mod round;
mod scrape;

/// `vidq bench api`.
#[derive(Debug, Args)]
pub struct ApiBenchArgs {
    /// Concurrent clients, each over one keep-alive connection.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Uploads confirmed in each round.
    #[arg(long, default_value_t = 6400)]
    pub confirms: usize,
    /// Seconds of status reads in each round.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Rounds; the table shows medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// READY videos the status reads spread over (client c reads video c mod N, at most
    /// `--confirms`). The same reads of one video (every client on one hot row) run after
    /// them and have a row of their own.
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub read_videos: u32,
    /// The API's database pool (`VIDQ_DB_POOL_SIZE`), also pgbench's client count.
    #[arg(long, default_value_t = 10)]
    pub pool: u32,
    /// Confirms each round runs once per value, each with a fresh API and database:
    /// `VIDQ_CONFIRM_BATCH_MAX`, the most confirms committed in one transaction. With 1 the
    /// API gets as many committers as pool connections, so each confirm commits on its own
    /// as it would without batches; otherwise the default committers. The status reads run
    /// against the last.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub confirm_batch: Vec<u16>,
    /// Confirms at a fixed offered rate, this percentage of the round's pgbench ceiling,
    /// after the last `--confirm-batch` setting's (see the module's doc); 0 skips them.
    #[arg(long, value_name = "PERCENT", default_value_t = 50)]
    pub paced_share: u32,
    /// Seconds of paced confirms in each round.
    #[arg(long, default_value_t = 5,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub paced_seconds: u64,
    /// Runs the API from this `vidq` binary instead of this one (to compare two builds on
    /// one machine; the database is migrated by this one).
    #[arg(long, value_name = "PATH")]
    pub api_bin: Option<std::path::PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// Runs the benchmark and prints its table.
pub async fn run(args: ApiBenchArgs) -> anyhow::Result<()> {
    ensure!(
        args.clients > 0 && args.confirms >= args.clients,
        "need confirms >= clients > 0"
    );
    ensure!(
        args.read_videos as usize <= args.confirms,
        "--read-videos {} needs as many --confirms (the READY videos are the round's own)",
        args.read_videos
    );
    ensure!(
        !args.confirm_batch.is_empty() && !args.confirm_batch.contains(&0),
        "--confirm-batch takes sizes of 1 or more"
    );
    let paced_part = match args.paced_share {
        0 => String::new(),
        share => format!(
            "{} s of confirms paced at {share}% of the ceiling, ",
            args.paced_seconds
        ),
    };
    println!(
        "vidq bench api: {} keep-alive clients, {} confirms, {paced_part}{} s of status reads of {} \
         READY video(s) a round, API pool {}, confirm batches of at most {:?}, medians of {} \
         rounds",
        args.clients,
        args.confirms,
        args.seconds,
        args.read_videos,
        args.pool,
        args.confirm_batch,
        args.rounds
    );
    let mut rounds = Vec::new();
    for _ in 0..args.rounds.max(1) {
        rounds.push(round(&args).await.context("api round")?);
    }
    let at = |pick: &dyn Fn(&Round) -> &Rate, p: f64| {
        let each: Vec<f64> = rounds
            .iter()
            .map(|r| percentile(&pick(r).latencies, p).as_secs_f64())
            .collect();
        ms(Duration::from_secs_f64(median(&each)))
    };
    let ceilings: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.ceiling.as_ref().ok().copied())
        .collect();
    println!();
    println!(
        "{:<36} | {:>9} | {:>7} | {:>7} | {:>18} | per round",
        "", "per s", "p50 ms", "p99 ms", "pgbench ceiling"
    );
    let row = |label: &str, pick: &dyn Fn(&Round) -> &Rate, ceiling: &str| {
        let rates: Vec<f64> = rounds.iter().map(|r| pick(r).per_s).collect();
        let each = rates
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{label:<36} | {:>9.0} | {:>7} | {:>7} | {ceiling:>18} | {each}",
            median(&rates),
            at(pick, 50.0),
            at(pick, 99.0),
        );
    };
    for (i, batch) in args.confirm_batch.iter().enumerate() {
        let ceiling = if ceilings.is_empty() {
            let why = rounds
                .iter()
                .find_map(|r| r.ceiling.as_ref().err().cloned())
                .unwrap_or_default();
            format!("- ({why})")
        } else {
            let ratios: Vec<f64> = rounds
                .iter()
                .filter_map(|r| r.ceiling.as_ref().ok().map(|c| r.confirms[i].per_s / c))
                .collect();
            format!("{:.0} ({:.0}%)", median(&ceilings), 100.0 * median(&ratios))
        };
        row(
            &format!("POST /v1/uploads/{{id}}/confirm, ≤{batch}"),
            &|r| &r.confirms[i],
            &ceiling,
        );
    }
    if rounds.iter().all(|r| r.paced.is_some()) {
        fn paced(r: &Round) -> &Paced {
            r.paced.as_ref().expect("every round was paced")
        }
        let offered: Vec<f64> = rounds.iter().map(|r| paced(r).offered).collect();
        let batch = args.confirm_batch.last().expect("checked non-empty");
        row(
            &format!("confirm, ≤{batch}, paced"),
            &|r| &paced(r).rate,
            &format!("offered {:.0} ({}%)", median(&offered), args.paced_share),
        );
    } else if args.paced_share > 0 {
        println!("confirm, paced: not run (no pgbench ceiling to take a share of)");
    }
    row(
        &format!("GET /v1/videos/{{id}}, {} READY", args.read_videos),
        &|r| &r.reads,
        "",
    );
    row("GET /v1/videos/{id}, one hot row", &|r| &r.hot_reads, "");
    let batches: Vec<String> = args
        .confirm_batch
        .iter()
        .enumerate()
        .map(|(i, batch)| {
            let means: Vec<f64> = rounds
                .iter()
                .filter_map(|r| r.confirms[i].mean_batch)
                .collect();
            match means.is_empty() {
                true => format!("≤{batch}: -"),
                false => format!("≤{batch}: {:.1}", median(&means)),
            }
        })
        .collect();
    println!(
        "confirms per transaction, mean (the API's vidq_confirm_batch_size): {}",
        batches.join(", ")
    );
    let paced: Vec<f64> = rounds
        .iter()
        .filter_map(|r| r.paced.as_ref()?.rate.mean_batch)
        .collect();
    if !paced.is_empty() {
        println!(
            "confirms per transaction while paced, mean: {:.1}",
            median(&paced)
        );
    }
    let mean_of = |pick: &dyn Fn(&Round) -> &Rate| {
        let means: Vec<f64> = rounds.iter().filter_map(|r| pick(r).mean_batch).collect();
        match means.is_empty() {
            true => "-".to_owned(),
            false => format!("{:.1}", median(&means)),
        }
    };
    println!(
        "status reads per statement, mean (the API's vidq_status_read_batch_size): {} spread, {} hot",
        mean_of(&|r| &r.reads),
        mean_of(&|r| &r.hot_reads)
    );
    Ok(())
}
