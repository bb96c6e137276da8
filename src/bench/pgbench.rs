//! pgbench, the yardstick beside several benchmarks: a script run by a number of clients a
//! number of times each, read back as transactions per second.

use anyhow::{Context, ensure};

/// Runs `script` (pgbench's own language) `per_client` times on each of `clients`
/// connections to `url`, with its statements prepared, and returns its transactions per
/// second; fails unless every transaction ran.
pub(crate) async fn tps(
    url: &str,
    script: &str,
    clients: u32,
    per_client: u64,
    variables: &[(&str, String)],
) -> anyhow::Result<f64> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("script.sql");
    std::fs::write(&path, script)?;
    let out = tokio::process::Command::new("pgbench")
        .args(["-n", "-M", "prepared", "-j", "2"])
        .arg(format!("-c{clients}"))
        .arg(format!("-t{per_client}"))
        .args(
            variables
                .iter()
                .map(|(name, value)| format!("-D{name}={value}")),
        )
        .arg("-f")
        .arg(&path)
        .arg(url)
        .output()
        .await
        .context("running pgbench (is it installed?)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let whole = format!(
        "actually processed: {0}/{0}",
        per_client * u64::from(clients)
    );
    ensure!(
        text.contains(&whole),
        "pgbench: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("no tps in pgbench's output: {text}"))
}
