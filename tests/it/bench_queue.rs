//! `vidq bench queue` as a reader of docs/benchmarks.md reruns it: its worker processes drain
//! the jobs, pgbench runs the queue's own statements beside them, and both claim modes get a
//! row.

use crate::support::cli::{stderr, vidq};
use crate::support::db::server_url;

#[tokio::test]
async fn the_queue_benchmark_drains_with_worker_processes_beside_both_pgbench_ceilings() {
    assert!(
        std::process::Command::new("pgbench")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "pgbench is not installed (Debian: the postgresql package); .ci/run installs it"
    );
    let url = server_url();
    let args = [
        "bench",
        "queue",
        "--jobs",
        "64",
        "--workers",
        "2",
        "--slots",
        "1",
        "--backlog",
        "10",
        "--rounds",
        "1",
        "--pickups",
        "0",
        "--no-peer",
        "--database-url",
        &url,
    ];
    let out = vidq(&args, &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("2 |"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    let claims: Vec<&str> = rows.iter().map(|r| r[2]).collect();
    assert_eq!(claims, ["async", "sync"], "{text}");
    for row in &rows {
        assert_eq!(row[1], "2x1", "two processes of one slot: {text}");
        let number = |i: usize| row[i].parse::<f64>().unwrap_or(0.0);
        assert!(number(4) > 0.0, "vidq drained: {text}");
        assert!(number(5) > 0.0, "the one-job ceiling ran: {text}");
        assert!(number(7) > 0.0, "the batched ceiling ran: {text}");
    }
}
