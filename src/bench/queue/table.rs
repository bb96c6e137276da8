//! The lines of the two tables: throughput (with its ratios to the ceiling and the peer) and
//! pickup latency.

use std::time::Duration;

use super::ClaimCommit;
use super::compare::{CeilingShape, Measured, PeerRun};
use super::layout_name;
use super::pickup::Pickups;
use crate::bench::stats::{median, ms, percentile};

/// One line of the throughput table: every round's measurements at one worker count,
/// backlog and number of slots per process.
#[derive(Default)]
pub(super) struct Row {
    /// vidq's jobs/s.
    pub(super) rates: Vec<f64>,
    /// vidq's jobs/s over each ceiling of the same round, one list per
    /// [`CeilingShape`](super::compare::CeilingShape).
    pub(super) to_ceiling: [Vec<f64>; 2],
    /// READY finalizes per finalize transaction.
    pub(super) per_commit: Vec<f64>,
    /// vidq's jobs/s over the peer's of the same round, one list per
    /// [`PeerRun`](super::compare::PeerRun).
    pub(super) to_peer: [Vec<f64>; 4],
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
    (workers, slots, claims): (u32, u32, ClaimCommit),
    backlog: i64,
    row: &Row,
    ceilings: &[Measured; 2],
    peers: &[Measured; 4],
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
    let mut notes = format!("finalizes/commit {:.1}", median(&row.per_commit));
    let ceiling_headings = CeilingShape::ALL.map(CeilingShape::heading);
    let peer_headings = PeerRun::ALL.map(PeerRun::heading);
    let headings = ceiling_headings.iter().chain(&peer_headings);
    for (heading, to) in headings.zip(row.to_ceiling.iter().chain(&row.to_peer)) {
        notes.push_str(&format!("; {heading} {}", each(to)));
    }
    let whys = ceilings.iter().chain(peers).map(|m| &m.why_not);
    for why in whys.flatten() {
        notes.push_str(&format!(" ({why})"));
    }
    let layout = layout_name(workers, slots);
    let mut line = format!(
        "{workers:>7} | {layout:>9} | {:>5} | {backlog:>8} | {:>10}",
        claims.name(),
        rate(&row.rates),
    );
    for (ceiling, to) in ceilings.iter().zip(&row.to_ceiling) {
        line.push_str(&format!(
            " | {:>13} | {:>8}",
            rate(&ceiling.rates),
            ratio(to)
        ));
    }
    for (peer, to) in peers.iter().zip(&row.to_peer) {
        line.push_str(&format!(" | {:>14} | {:>9}", rate(&peer.rates), ratio(to)));
    }
    println!("{line} | {notes}");
}
