//! The limits tus is measured against, each taken the way vidq's path takes it: for the
//! spool, fio making the spool's own writes and syncs; for S3, the SDK's multipart
//! upload with the body, checksum and signing of the `s3` store's parts.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bytes::Bytes;

use crate::adapters::storage::Storage;

/// Decimal MB/s.
pub(super) fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

/// `writers` fio jobs at once writing `total` bytes between them into new files in `dir`
/// with the spool's own calls: `write` of 1 MiB (the spool's write buffer), `fdatasync`
/// after every PATCH's worth (`chunk_mib`), no preallocation. MB/s of the whole, as fio
/// times it. (`dd oflag=dsync` makes each write synchronous instead, which on the VM these
/// benchmarks run on was up to three times slower than the same bytes written, then synced:
/// not the spool's pattern.)
pub(super) async fn fio(
    dir: &Path,
    total: u64,
    writers: u64,
    chunk_mib: u64,
) -> anyhow::Result<f64> {
    let out = tokio::process::Command::new("fio")
        .args([
            "--name=spool-limit",
            "--rw=write",
            "--bs=1M",
            "--ioengine=sync",
        ])
        .args(["--fallocate=none", "--unlink=1", "--group_reporting"])
        .args(["--output-format=json"])
        .arg(format!("--directory={}", dir.display()))
        .arg(format!("--fdatasync={chunk_mib}"))
        .arg(format!("--size={}", total / writers))
        .arg(format!("--numjobs={writers}"))
        .output()
        .await
        .context("running fio (apt-get install fio)")?;
    ensure!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    fio_mb_per_s(&String::from_utf8_lossy(&out.stdout))
}

/// The write rate of fio's JSON report (its jobs grouped into one), in MB/s.
fn fio_mb_per_s(report: &str) -> anyhow::Result<f64> {
    let report: serde_json::Value = serde_json::from_str(report).context("fio's report")?;
    let bytes_per_s = report["jobs"][0]["write"]["bw_bytes"]
        .as_f64()
        .with_context(|| format!("no write rate in fio's report: {report}"))?;
    Ok(bytes_per_s / 1e6)
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
    use super::fio_mb_per_s;

    #[test]
    fn fios_rate_is_read_from_its_report() {
        let report = r#"{"fio version": "fio-3.33", "jobs": [{"jobname": "spool-limit",
            "write": {"io_bytes": 268435456, "bw_bytes": 1789569706}}]}"#;
        assert_eq!(fio_mb_per_s(report).unwrap(), 1789.569706);
        assert!(fio_mb_per_s(r#"{"jobs": []}"#).is_err());
        assert!(fio_mb_per_s("fio: no such option").is_err());
    }
}
