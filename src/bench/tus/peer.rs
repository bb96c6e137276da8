//! The peer tus server beside vidq in `vidq bench tus`: @tus/server 2.4.5
//! (`scripts/peers/tus-node/server.mjs`), with @tus/file-store on the same disk as vidq's
//! spool, or @tus/s3-store on the same S3 with the same part size, driven by the same client.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::super::{BENCH_BUCKET, BenchS3};
use crate::bench::stats::proc_kib;

/// Where the peer keeps its bytes.
pub(super) enum PeerStore<'a> {
    /// @tus/file-store in this directory.
    File(&'a Path),
    /// @tus/s3-store on the bench S3, parts of this many bytes, buffered in this directory
    /// (its `os.tmpdir()`) while they fill.
    S3 {
        s3: &'a BenchS3,
        part_bytes: u64,
        buffer_dir: &'a Path,
    },
}

/// The running peer, stopped when dropped.
pub(super) struct TusPeer {
    child: tokio::process::Child,
    /// Its tus creation URL.
    pub(super) creation_url: String,
}

impl TusPeer {
    /// Starts `script` with `store`; an error naming what is missing when the peer is not
    /// installed.
    pub(super) async fn start(script: &Path, store: PeerStore<'_>) -> anyhow::Result<Self> {
        let package = script.parent().unwrap_or(Path::new("."));
        ensure!(script.exists(), "{} not found", script.display());
        ensure!(
            package.join("node_modules").exists(),
            "the peer is not installed: npm ci --prefix {}",
            package.display()
        );
        let mut command = tokio::process::Command::new("node");
        command.arg(script);
        match store {
            PeerStore::File(dir) => {
                command.arg("file").arg(dir);
            }
            PeerStore::S3 {
                s3,
                part_bytes,
                buffer_dir,
            } => {
                command
                    .arg("s3")
                    .arg(s3.server.endpoint())
                    .arg(BENCH_BUCKET)
                    .arg(part_bytes.to_string())
                    .env("TMPDIR", buffer_dir)
                    .env("AWS_ACCESS_KEY_ID", "bench")
                    .env("AWS_SECRET_ACCESS_KEY", "bench-secret");
                if let Some(ca) = s3.ca_file() {
                    command.env("NODE_EXTRA_CA_CERTS", ca);
                }
            }
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting node (the tus peer)")?;
        let stdout = child.stdout.take().context("the peer's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let port = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(port) = line.strip_prefix("listening=") {
                    return anyhow::Ok(port.trim().parse::<u16>()?);
                }
            }
            bail!("the tus peer exited before it listened")
        })
        .await
        .context("the tus peer did not listen within 30 s")??;
        Ok(Self {
            child,
            creation_url: format!("http://127.0.0.1:{port}/files"),
        })
    }

    /// Peak resident memory of the node process so far, in MiB.
    pub(super) fn peak_rss_mib(&self) -> f64 {
        proc_kib(self.child.id(), "VmHWM").unwrap_or(f64::NAN) / 1024.0
    }
}
