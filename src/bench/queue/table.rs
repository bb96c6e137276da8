//! The lines of the two tables: throughput (with its ratios to the ceiling and the peer) and
//! pickup latency.

use std::time::Duration;

use super::compare::PeerRuns;
use super::layout_name;
use super::pickup::Pickups;
use crate::bench::stats::{median, ms, percentile};

/// One line of the throughput table: every round's measurements at one worker count,
/// backlog and number of slots per process.
#[derive(Default)]
pub(super) struct Row {
    /// vidq's jobs/s.
    pub(super) rates: Vec<f64>,
    /// vidq's jobs/s over the ceiling of the same round.
    pub(super) to_ceiling: Vec<f64>,
    /// READY finalizes per finalize transaction.
    pub(super) per_commit: Vec<f64>,
    /// vidq's jobs/s over the peer's of the same round, one list per [`PeerTask`](super::compare::PeerTask).
    pub(super) to_peer: [Vec<f64>; 2],
}

/// One line of the pickup table: medians over `runs`, then each run's p99.
pub(super) fn print_pickups(workers: u32, layout: &str, listening: &str, runs: &[Pickups]) {
    let at = |p: f64| {
        let each: Vec<f64> = runs
            .iter()
            .map(|r| percentile(&r.latencies, p).as_secs_f64())
            .collect();
        ms(Duration::from_secs_f64(median(&each)))
    };
    let claims: Vec<f64> = runs.iter().map(|r| r.claims_per_job).collect();
    let each_p99: Vec<String> = runs
        .iter()
        .map(|r| ms(percentile(&r.latencies, 99.0)))
        .collect();
    let early: Vec<f64> = runs.iter().map(|r| r.early as f64).collect();
    println!(
        "{workers:>7} | {layout:>9} | {listening:<12} | {:>6} | {:>6} | {:>6} | {:>6} | {:>10.1} | {:>5.0} | {}",
        at(50.0),
        at(95.0),
        at(99.0),
        at(100.0),
        median(&claims),
        median(&early),
        each_p99.join(" ")
    );
}

/// Prints one line of the throughput table.
pub(super) fn print_row(
    workers: u32,
    slots: u32,
    backlog: i64,
    row: &Row,
    peers: &[PeerRuns; 2],
    ceilings: &[f64],
    why_no_ceiling: &Option<String>,
) {
    let ratio = |r: &[f64]| match r {
        [] => "-".to_owned(),
        r => format!("{:.0}%", 100.0 * median(r)),
    };
    let rate = |r: &[f64]| match r {
        [] => "-".to_owned(),
        r => format!("{:.0}", median(r)),
    };
    let each = |r: &[f64]| -> String {
        r.iter()
            .map(|x| format!("{:.0}%", 100.0 * x))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let [noop, ready] = peers;
    let mut notes = format!(
        "finalizes/commit {:.1}; ceiling {}; no-op {}; + writes {}",
        median(&row.per_commit),
        each(&row.to_ceiling),
        each(&row.to_peer[0]),
        each(&row.to_peer[1])
    );
    for why in [why_no_ceiling, &noop.why_not, &ready.why_not]
        .into_iter()
        .flatten()
    {
        notes.push_str(&format!(" ({why})"));
    }
    let layout = layout_name(workers, slots);
    println!(
        "{workers:>7} | {layout:>9} | {backlog:>8} | {:>10} | {:>16} | {:>8} | {:>14} | {:>9} | {:>14} | {:>9} | {notes}",
        rate(&row.rates),
        rate(ceilings),
        ratio(&row.to_ceiling),
        rate(&noop.rates),
        ratio(&row.to_peer[0]),
        rate(&ready.rates),
        ratio(&row.to_peer[1]),
    );
}
