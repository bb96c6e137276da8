//! `vidq bench tus --store spool|s3`: how fast bytes get through tus over loopback, next to
//! the limit of where they go, measured in the same run. A real `vidq api` process with that
//! store; one client PATCHing `--gib` GiB in `--chunk-mib` MiB chunks, then `--clients`
//! clients at once sending the same total; medians of `--rounds`. The limit: for `spool`,
//! `dd if=/dev/zero bs=CHUNK oflag=dsync` onto the spool's directory (each block durable
//! before the next, as each PATCH is before its answer), one writing the same bytes and
//! `--clients` at once writing their share each (each timed by its own report); for
//! `s3`, the
//! same bytes sent by aws-sdk-s3's own multipart upload (parts of `--part-mib`, from memory)
//! to the same S3 (plain HTTP, or HTTPS with `--s3-tls`), by one client and by `--clients`
//! at once. Then a fresh API process takes `--clients` uploads of `--rss-gib` GiB at once
//! and its peak RSS (`VmHWM`) is reported: neither store's memory grows with the uploads.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bytes::Bytes;
use clap::Args;

use super::Scratch;
use super::stats::{median, proc_kib};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// `vidq bench tus`.
#[derive(Debug, Args)]
pub struct TusBenchArgs {
    /// Where the API spools (the disk under test); emptied after each upload.
    #[arg(long = "spool-dir", default_value = "target/bench-spool")]
    pub spool_dir: PathBuf,
    /// Size of the one client's upload, and the total of the concurrent clients', in GiB.
    #[arg(long, default_value_t = 1)]
    pub gib: u64,
    /// PATCH size in MiB.
    #[arg(long = "chunk-mib", default_value_t = 8)]
    pub chunk_mib: u64,
    /// Concurrent clients of the second measurement.
    #[arg(long, default_value_t = 8)]
    pub clients: u64,
    /// Rounds (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Size of each of the `--clients` uploads whose peak API memory is reported, in GiB
    /// (0: skip).
    #[arg(long = "rss-gib", default_value_t = 1)]
    pub rss_gib: u64,
    /// Where the API keeps tus bytes while they arrive (`VIDQ_TUS_STORE`).
    #[arg(long, default_value = "spool", value_parser = ["spool", "s3"])]
    pub store: String,
    /// With `--store s3`: the part size (`VIDQ_TUS_PART_BYTES`), in MiB, for vidq and for the
    /// SDK's own upload alike.
    #[arg(long = "part-mib", default_value_t = 8)]
    pub part_mib: u64,
    /// With `--store s3`: reach the S3 over HTTPS (a self-signed certificate), as S3 is
    /// reached in production, instead of plain HTTP. Over HTTPS the SDK sends a streamed body
    /// with a CRC32 trailer only; over plain HTTP it also signs every 64 KiB of it (SHA-256).
    #[arg(long = "s3-tls")]
    pub s3_tls: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// A `vidq api` child process and a key to call it with.
struct Api {
    child: tokio::process::Child,
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Api {
    async fn start(
        scratch: &Scratch,
        s3: &super::BenchS3,
        spool: &Path,
        key: &str,
        args: &TusBenchArgs,
    ) -> anyhow::Result<Self> {
        let max_upload = (64 * GIB).to_string();
        let part_bytes = (args.part_mib * MIB).to_string();
        let (child, base) = super::spawn_api(
            None,
            scratch,
            s3,
            spool,
            &[
                ("VIDQ_MAX_UPLOAD_BYTES", &max_upload),
                ("VIDQ_TUS_STORE", &args.store),
                ("VIDQ_TUS_PART_BYTES", &part_bytes),
            ],
        )
        .await?;
        Ok(Self {
            child,
            base,
            key: key.to_owned(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(600))
                .build()?,
        })
    }

    async fn create(&self, length: u64) -> anyhow::Result<String> {
        let meta = "filename YmVuY2gubXA0,filetype dmlkZW8vbXA0"; // bench.mp4, video/mp4
        let answer = self
            .http
            .post(format!("{}/v1/tus/", self.base))
            .bearer_auth(&self.key)
            .header("Tus-Resumable", "1.0.0")
            .header("Upload-Length", length.to_string())
            .header("Upload-Metadata", meta)
            .send()
            .await?;
        ensure!(answer.status() == 201, "tus POST: {}", answer.status());
        Ok(answer.headers()["location"].to_str()?.to_owned())
    }

    /// One client: creates an upload of `length` and PATCHes `chunk` until it is whole.
    async fn upload(&self, length: u64, chunk: &Bytes) -> anyhow::Result<()> {
        let url = self.create(length).await?;
        let mut offset = 0u64;
        while offset < length {
            let n = (length - offset).min(chunk.len() as u64);
            let answer = self
                .http
                .patch(&url)
                .bearer_auth(&self.key)
                .header("Tus-Resumable", "1.0.0")
                .header("Upload-Offset", offset.to_string())
                .header("Content-Type", "application/offset+octet-stream")
                .body(chunk.slice(..n as usize))
                .send()
                .await?;
            ensure!(answer.status() == 204, "tus PATCH: {}", answer.status());
            offset += n;
        }
        Ok(())
    }

    fn peak_rss_mib(&self) -> f64 {
        proc_kib(self.child.id(), "VmHWM").unwrap_or(f64::NAN) / 1024.0
    }
}

/// Decimal MB/s, as `dd` reports it.
fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

fn empty(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}

/// `writers` runs of `dd if=/dev/zero of=DIR/dd-N.bin bs=CHUNK oflag=dsync` at once, `total`
/// bytes between them, each block on disk before the next is written (what the spool
/// promises of each PATCH before its 204): MB/s of the whole, each dd timed by itself (its
/// own report, which leaves out its process start) and the whole by the slowest.
async fn dd(dir: &Path, total: u64, writers: u64, chunk_mib: u64) -> anyhow::Result<f64> {
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

/// Runs the benchmark and prints its table.
pub async fn run(args: TusBenchArgs) -> anyhow::Result<()> {
    ensure!(
        args.chunk_mib > 0 && args.clients > 0 && args.gib > 0,
        "sizes must be positive"
    );
    let scratch = Scratch::create(&args.server.database_url, "tus").await?;
    let result = measure(&args, &scratch).await;
    scratch.drop_now().await;
    let _ = std::fs::remove_dir_all(&args.spool_dir);
    result
}

async fn measure(args: &TusBenchArgs, scratch: &Scratch) -> anyhow::Result<()> {
    let s3 = if args.s3_tls {
        super::BenchS3::start_tls().await?
    } else {
        super::BenchS3::start().await?
    };
    let pool = crate::db::connect(&scratch.url, 2).await?;
    let (_, key) = crate::app::users::create_user(&pool, "bench").await?;
    empty(&args.spool_dir)?;
    let spool = std::fs::canonicalize(&args.spool_dir)?;
    let in_s3 = args.store == "s3";

    // Bytes that do not compress or repeat within a chunk.
    let chunk: Bytes = (0..args.chunk_mib * MIB)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect::<Vec<u8>>()
        .into();
    let total = args.gib * GIB;
    let per_client = total / args.clients;
    // The SDK's uploads send the same bytes, from memory.
    let whole: Bytes = if in_s3 {
        let mut whole = bytes::BytesMut::with_capacity(total as usize);
        while (whole.len() as u64) < total {
            let n = (total as usize - whole.len()).min(chunk.len());
            whole.extend_from_slice(&chunk[..n]);
        }
        whole.freeze()
    } else {
        Bytes::new()
    };
    let part = (args.part_mib * MIB) as usize;
    // What the previous measurement left (spool files, objects) goes before the next.
    let clean = async || -> anyhow::Result<()> {
        empty(&spool)?;
        if in_s3 {
            s3.storage.delete_prefix("originals/").await?;
            s3.storage.delete_prefix("ceiling/").await?;
        }
        Ok(())
    };
    let api = Api::start(scratch, &s3, &spool, key.reveal(), args).await?;
    println!(
        "vidq bench tus: loopback, store {}, {} MiB PATCHes{}, {} round(s)\n",
        args.store,
        args.chunk_mib,
        if in_s3 {
            format!(
                ", {} MiB parts, S3 over {}",
                args.part_mib,
                if args.s3_tls { "HTTPS" } else { "plain HTTP" }
            )
        } else {
            format!(", spool {}", spool.display())
        },
        args.rounds
    );
    let (mut one, mut many) = (Vec::new(), Vec::new());
    let (mut limit_one, mut limit_many) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let started = Instant::now();
        api.upload(total, &chunk).await?;
        one.push(mb_per_s(total, started.elapsed()));
        clean().await?;

        let started = Instant::now();
        let clients = (0..args.clients).map(|_| api.upload(per_client, &chunk));
        for done in futures_util::future::join_all(clients).await {
            done?;
        }
        many.push(mb_per_s(per_client * args.clients, started.elapsed()));
        clean().await?;

        if in_s3 {
            let started = Instant::now();
            s3.storage
                .put_multipart_bytes("ceiling/one", whole.clone(), part)
                .await?;
            limit_one.push(mb_per_s(total, started.elapsed()));
            clean().await?;
            let keys: Vec<String> = (0..args.clients).map(|n| format!("ceiling/{n}")).collect();
            let started = Instant::now();
            let clients = keys.iter().map(|key| {
                s3.storage
                    .put_multipart_bytes(key, whole.slice(..per_client as usize), part)
            });
            for done in futures_util::future::join_all(clients).await {
                done?;
            }
            limit_many.push(mb_per_s(per_client * args.clients, started.elapsed()));
            clean().await?;
        } else {
            let chunk_mib = args.chunk_mib;
            limit_one.push(dd(&spool, total, 1, chunk_mib).await?);
            let all = per_client * args.clients;
            limit_many.push(dd(&spool, all, args.clients, chunk_mib).await?);
        }
        println!(
            "round {round}: 1 client {:.0} MB/s (limit {:.0}), {} clients {:.0} MB/s (limit {:.0})",
            one[one.len() - 1],
            limit_one[limit_one.len() - 1],
            args.clients,
            many[many.len() - 1],
            limit_many[limit_many.len() - 1],
        );
    }
    let api_rss = api.peak_rss_mib();
    drop(api);
    let (one, many) = (median(&one), median(&many));
    let (limit_one, limit_many) = (median(&limit_one), median(&limit_many));
    println!("\n| what | MB/s (median) | of the limit |");
    println!("|---|---|---|");
    if in_s3 {
        println!(
            "| limit: aws-sdk-s3 multipart upload, 1 client, {} GiB | {limit_one:.0} | 100% |",
            args.gib
        );
        println!(
            "| limit: aws-sdk-s3 multipart upload, {} clients at once, {} GiB in all | {limit_many:.0} | 100% |",
            args.clients, args.gib
        );
    } else {
        println!(
            "| limit: `dd bs={}M oflag=dsync`, 1 writer, {} GiB | {limit_one:.0} | 100% |",
            args.chunk_mib, args.gib
        );
        println!(
            "| limit: `dd bs={}M oflag=dsync`, {} writers at once, {} GiB in all | {limit_many:.0} | 100% |",
            args.chunk_mib, args.clients, args.gib
        );
    }
    println!(
        "| vidq tus ({} store), 1 client, {} GiB in {} MiB PATCHes | {one:.0} | {:.0}% |",
        args.store,
        args.gib,
        args.chunk_mib,
        100.0 * one / limit_one
    );
    println!(
        "| vidq tus ({} store), {} clients at once, {} GiB in all | {many:.0} | {:.0}% |",
        args.store,
        args.clients,
        args.gib,
        100.0 * many / limit_many
    );
    println!("\npeak RSS of that API process: {api_rss:.1} MiB");

    if args.rss_gib > 0 {
        clean().await?;
        let api = Api::start(scratch, &s3, &spool, key.reveal(), args).await?;
        let idle = api.peak_rss_mib();
        let started = Instant::now();
        let uploads = (0..args.clients).map(|_| api.upload(args.rss_gib * GIB, &chunk));
        for done in futures_util::future::join_all(uploads).await {
            done?;
        }
        let elapsed = started.elapsed();
        println!(
            "\n{} tus uploads of {} GiB at once into a fresh API process ({} store): peak RSS \
             {:.1} MiB (started at {idle:.1} MiB), {:.0} MB/s",
            args.clients,
            args.rss_gib,
            args.store,
            api.peak_rss_mib(),
            mb_per_s(args.clients * args.rss_gib * GIB, elapsed)
        );
        drop(api);
        clean().await?;
    }
    Ok(())
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
