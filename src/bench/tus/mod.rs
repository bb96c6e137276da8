//! `vidq bench tus --store spool|s3`: how fast bytes get through tus over loopback, next to
//! a peer tus server and the limit of where the bytes go, all measured in the same run. A
//! real `vidq api` process with that store; one client PATCHing `--gib` GiB in
//! `--chunk-mib` MiB chunks, then `--clients` clients at once sending the same total;
//! medians of `--rounds`. The same client then drives the peer, @tus/server 2.4.5 with
//! @tus/file-store (spool) or @tus/s3-store (s3, the same part size and S3). The limit: for
//! `spool`, fio writing into the spool's directory with the spool's own calls (1 MiB writes,
//! `fdatasync` after each PATCH's worth, as each PATCH is durable before its answer), one
//! writer and `--clients` at once; for `s3`, aws-sdk-s3's multipart upload of the same bytes from memory, each part
//! sent with the body, checksum and signing vidq's parts get, to the same S3 (plain HTTP,
//! or HTTPS with `--s3-tls`), one client and `--clients` at once. Then a fresh API process
//! takes `--clients` uploads of `--rss-gib` GiB at once and its peak RSS (`VmHWM`) is
//! reported: neither store's memory grows with the uploads.

mod client;
mod limit;
mod peer;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::ensure;
use bytes::Bytes;
use clap::Args;

use super::Scratch;
use super::stats::{median, proc_kib};
use client::TusClient;
use limit::{fio, mb_per_s, sdk_multipart};
use peer::{PeerStore, TusPeer};

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
    /// The peer server's script (@tus/server; installed by
    /// `npm ci --prefix scripts/peers/tus-node`).
    #[arg(
        long = "peer-script",
        default_value = "scripts/peers/tus-node/server.mjs"
    )]
    pub peer_script: PathBuf,
    /// Leave the peer out (it is measured by default, and a missing one is an error).
    #[arg(long = "no-peer")]
    pub no_peer: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

/// A `vidq api` child process and a tus client of it.
struct Api {
    child: tokio::process::Child,
    client: TusClient,
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
        let client = TusClient::new(format!("{base}/v1/tus/"), Some(key.to_owned()))?;
        Ok(Self { child, client })
    }

    fn peak_rss_mib(&self) -> f64 {
        proc_kib(self.child.id(), "VmHWM").unwrap_or(f64::NAN) / 1024.0
    }
}

fn empty(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}

/// Removes what `dir` holds, keeping the directory (a running peer's).
fn empty_contents(dir: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        match path.is_dir() {
            true => std::fs::remove_dir_all(&path)?,
            false => std::fs::remove_file(&path)?,
        }
    }
    Ok(())
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

/// One series of measurements: one client, then many at once (MB/s per round).
#[derive(Default)]
struct Series {
    one: Vec<f64>,
    many: Vec<f64>,
}

impl Series {
    fn medians(&self) -> (f64, f64) {
        (median(&self.one), median(&self.many))
    }
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
    // The peer's directory sits beside the spool, on the same disk: its files (file
    // store), or the parts it buffers before sending them (S3 store).
    let peer_dir = spool.with_file_name(format!(
        "{}-peer",
        spool
            .file_name()
            .map_or("spool".into(), |n| n.to_string_lossy())
    ));
    empty(&peer_dir)?;
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
    // What the previous measurement left (spool and peer files, objects) goes before the
    // next.
    let clean = async || -> anyhow::Result<()> {
        empty(&spool)?;
        empty_contents(&peer_dir)?;
        if in_s3 {
            s3.storage.delete_prefix("").await?;
        }
        Ok(())
    };
    let api = Api::start(scratch, &s3, &spool, key.reveal(), args).await?;
    let peer = match args.no_peer {
        true => None,
        false => {
            let store = match in_s3 {
                true => PeerStore::S3 {
                    s3: &s3,
                    part_bytes: args.part_mib * MIB,
                    buffer_dir: &peer_dir,
                },
                false => PeerStore::File(&peer_dir),
            };
            Some(TusPeer::start(&args.peer_script, store).await?)
        }
    };
    let peer_client = match &peer {
        Some(peer) => Some(TusClient::new(peer.creation_url.clone(), None)?),
        None => None,
    };
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
    let (mut vidq, mut peers, mut limit) =
        (Series::default(), Series::default(), Series::default());
    for round in 1..=args.rounds {
        for (client, series) in [
            (Some(&api.client), &mut vidq),
            (peer_client.as_ref(), &mut peers),
        ] {
            let Some(client) = client else { continue };
            let started = Instant::now();
            client.upload(total, &chunk).await?;
            series.one.push(mb_per_s(total, started.elapsed()));
            clean().await?;
            let started = Instant::now();
            client.uploads(args.clients, per_client, &chunk).await?;
            series
                .many
                .push(mb_per_s(per_client * args.clients, started.elapsed()));
            clean().await?;
        }
        if in_s3 {
            limit
                .one
                .push(sdk_multipart(&s3.storage, &whole, total, 1, part).await?);
            clean().await?;
            let many = sdk_multipart(&s3.storage, &whole, total, args.clients, part).await?;
            limit.many.push(many);
            clean().await?;
        } else {
            limit.one.push(fio(&spool, total, 1, args.chunk_mib).await?);
            let all = per_client * args.clients;
            limit
                .many
                .push(fio(&spool, all, args.clients, args.chunk_mib).await?);
        }
        let last = |v: &Vec<f64>| v.last().copied().unwrap_or(f64::NAN);
        println!(
            "round {round}: 1 client vidq {:.0} peer {:.0} limit {:.0} MB/s; {} clients vidq {:.0} peer {:.0} limit {:.0} MB/s",
            last(&vidq.one),
            last(&peers.one),
            last(&limit.one),
            args.clients,
            last(&vidq.many),
            last(&peers.many),
            last(&limit.many),
        );
    }
    let api_rss = api.peak_rss_mib();
    let peer_rss = peer.as_ref().map(TusPeer::peak_rss_mib);
    drop(api);
    drop(peer);
    print_table(args, &vidq, peer_client.is_some().then_some(&peers), &limit);
    println!("\npeak RSS of that API process: {api_rss:.1} MiB");
    if let Some(rss) = peer_rss {
        println!("peak RSS of the peer's node process: {rss:.1} MiB");
    }

    if args.rss_gib > 0 {
        clean().await?;
        let api = Api::start(scratch, &s3, &spool, key.reveal(), args).await?;
        let idle = api.peak_rss_mib();
        let started = Instant::now();
        api.client
            .uploads(args.clients, args.rss_gib * GIB, &chunk)
            .await?;
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
    let _ = std::fs::remove_dir_all(&peer_dir);
    Ok(())
}

/// The medians as a table, each row against the limit of its client count.
fn print_table(args: &TusBenchArgs, vidq: &Series, peer: Option<&Series>, limit: &Series) {
    let (limit_one, limit_many) = limit.medians();
    let (gib, clients) = (args.gib, args.clients);
    println!("\n| what | MB/s (median) | of the limit |");
    println!("|---|---|---|");
    let row = |what: String, mb: f64, of: f64| {
        println!("| {what} | {mb:.0} | {:.0}% |", 100.0 * mb / of);
    };
    let limit_name = match args.store.as_str() {
        "s3" => "aws-sdk-s3 multipart upload, streamed parts".to_owned(),
        _ => format!(
            "fio, 1 MiB writes, `fdatasync` every {} MiB",
            args.chunk_mib
        ),
    };
    let unit = if args.store == "s3" {
        "client"
    } else {
        "writer"
    };
    row(
        format!("limit: {limit_name}, 1 {unit}, {gib} GiB"),
        limit_one,
        limit_one,
    );
    row(
        format!("limit: {limit_name}, {clients} {unit}s at once, {gib} GiB in all"),
        limit_many,
        limit_many,
    );
    let store = &args.store;
    let (one, many) = vidq.medians();
    let chunk = args.chunk_mib;
    row(
        format!("vidq tus ({store} store), 1 client, {gib} GiB in {chunk} MiB PATCHes"),
        one,
        limit_one,
    );
    row(
        format!("vidq tus ({store} store), {clients} clients at once, {gib} GiB in all"),
        many,
        limit_many,
    );
    if let Some(peer) = peer {
        let (one, many) = peer.medians();
        let name = match store.as_str() {
            "s3" => "@tus/server 2.4.5 + @tus/s3-store 2.0.7",
            _ => "@tus/server 2.4.5 + @tus/file-store 2.1.1",
        };
        row(
            format!("{name}, 1 client, the same PATCHes"),
            one,
            limit_one,
        );
        row(
            format!("{name}, {clients} clients at once"),
            many,
            limit_many,
        );
    }
}
