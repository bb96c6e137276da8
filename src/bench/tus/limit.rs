//! The limits tus is measured against, each taken the way vidq's path takes it: for the
//! spool, `dd` with the spool's block size and durability; for S3, the SDK's multipart
//! upload with the body, checksum and signing of the `s3` store's parts.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bytes::Bytes;

use super::MIB;
use crate::adapters::storage::Storage;

/// Decimal MB/s, as `dd` reports it.
pub(super) fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

/// `writers` runs of `dd if=/dev/zero of=DIR/dd-N.bin bs=CHUNK oflag=dsync` at once, `total`
/// bytes between them, each block on disk before the next is written (what the spool
/// promises of each PATCH before its 204): MB/s of the whole, each dd timed by itself (its
/// own report, which leaves out its process start) and the whole by the slowest.
pub(super) async fn dd(
    dir: &Path,
    total: u64,
    writers: u64,
    chunk_mib: u64,
) -> anyhow::Result<f64> {
    let blocks = total / writers / (chunk_mib * MIB);
    let runs = (0..writers).map(|n| {
        let target = dir.join(format!("dd-{n}.bin"));
        async move {
            let out = tokio::process::Command::new("dd")
                .args(["if=/dev/zero", "oflag=dsync"])
                .arg(format!("bs={chunk_mib}M"))
                .arg(format!("count={blocks}"))
                .arg(format!("of={}", target.display()))
                .output()
                .await
                .context("running dd")?;
            ensure!(out.status.success(), "dd failed");
            std::fs::remove_file(&target)?;
            dd_seconds(&String::from_utf8_lossy(&out.stderr))
        }
    });
    let mut slowest: f64 = 0.0;
    for seconds in futures_util::future::join_all(runs).await {
        slowest = slowest.max(seconds?);
    }
    let written = blocks * chunk_mib * MIB * writers;
    Ok(mb_per_s(written, Duration::from_secs_f64(slowest)))
}

/// The seconds in dd's own report (`... copied, 2.34 s, 459 MB/s`).
fn dd_seconds(report: &str) -> anyhow::Result<f64> {
    report
        .lines()
        .find_map(|line| {
            let (_, after) = line.split_once(" copied, ")?;
            after.split_once(" s")?.0.parse::<f64>().ok()
        })
        .with_context(|| format!("no time in dd's report: {report}"))
}

/// Bytes a streamed part is fed at a time, as a request's body arrives in pieces.
const FRAME: usize = 64 * 1024;

/// `clients` multipart uploads at once under `ceiling/`, each the first `total / clients`
/// bytes of `whole` in parts of `part` bytes, sent as the `s3` store sends its parts
/// (`Storage::put_multipart_streamed`): MB/s of the whole.
pub(super) async fn sdk_multipart(
    storage: &Storage,
    whole: &Bytes,
    total: u64,
    clients: u64,
    part: usize,
) -> anyhow::Result<f64> {
    let each = (total / clients) as usize;
    let keys: Vec<String> = (0..clients).map(|n| format!("ceiling/{n}")).collect();
    let started = Instant::now();
    let uploads = keys
        .iter()
        .map(|key| storage.put_multipart_streamed(key, whole.slice(..each), part, FRAME));
    for done in futures_util::future::join_all(uploads).await {
        done?;
    }
    Ok(mb_per_s(each as u64 * clients, started.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::dd_seconds;

    #[test]
    fn dds_own_time_is_read_from_its_report() {
        let report = "1024+0 records in\n1024+0 records out\n1073741824 bytes (1.1 GB, 1.0 GiB) copied, 2.34567 s, 458 MB/s\n";
        assert_eq!(dd_seconds(report).unwrap(), 2.34567);
        assert!(dd_seconds("dd: error writing: No space left on device").is_err());
    }
}
