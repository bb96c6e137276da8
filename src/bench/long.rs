//! `vidq bench e2e --long SECONDS`: one long 720p upload from confirm to READY, encoded as one
//! job on one worker, then split into chunks on 1, 2... workers. Each worker is its own
//! `vidq worker` process pinned to its own core with one FFmpeg thread, as one-core machines
//! would be. Printed: confirm -> READY per path and worker count (medians over the rounds),
//! the ratios that say what splitting costs on one worker and gains on more, and the mean
//! SSIM of each path's MP4 against the source (FFmpeg's `ssim` filter, every frame).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

use super::e2e::{E2eBenchArgs, client_context, pinned_worker, stop_workers};
use super::stats::median;
use super::{BenchS3, Scratch};
use crate::app::{self, uploads::Confirmed};
use crate::domain::ids::{UploadId, VideoId};
use crate::domain::video::VideoStatus;

/// The source: `seconds` of FFmpeg's moving test pattern at 1280x720, 30 fps, with a sine.
fn long_clip(dir: &Path, seconds: u32) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("long_{seconds}s_720p.mp4"));
    if !path.exists() {
        std::fs::create_dir_all(dir)?;
        let partial = dir.join(format!("long_{seconds}s_720p.partial.mp4"));
        let status = std::process::Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"])
            .arg(format!("testsrc2=size=1280x720:rate=30:duration={seconds}"))
            .args(["-f", "lavfi", "-i"])
            .arg(format!("sine=frequency=440:duration={seconds}"))
            .args([
                "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
            ])
            .args(["-c:a", "aac", "-shortest"])
            .arg(&partial)
            .status()
            .context("running ffmpeg to make the long clip")?;
        ensure!(status.success(), "ffmpeg could not make {}", path.display());
        std::fs::rename(&partial, &path)?;
    }
    Ok(path)
}

/// One path and worker count: its confirm -> READY times and the first round's MP4.
struct Measured {
    label: &'static str,
    workers: u32,
    seconds: Vec<f64>,
    mp4: PathBuf,
}

/// Runs the long benchmark and prints its table.
pub async fn run(args: &E2eBenchArgs, seconds: u32) -> anyhow::Result<()> {
    let source = long_clip(&args.clips, seconds)?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let keep = tempfile::tempdir()?;
    println!(
        "vidq bench e2e --long {seconds}: one {seconds} s 1280x720 30 fps upload, {} rounds, workers pinned one per core ({cores} cores), 1 FFmpeg thread each; status polled every {} ms",
        args.rounds, args.poll_ms
    );
    let mut measured = vec![measure(args, &source, 1, false, cores, keep.path()).await?];
    for &workers in &args.nodes {
        measured.push(measure(args, &source, workers, true, cores, keep.path()).await?);
    }
    let whole = median(&measured[0].seconds);
    let chunked_one = measured
        .iter()
        .find(|m| m.label == "chunked" && m.workers == 1)
        .map(|m| median(&m.seconds));
    println!();
    println!(
        "{:>8} | {:>7} | {:>22} | {:>16} | {:>17} | {:>9}",
        "path",
        "workers",
        "confirm->READY median",
        "/ single, 1 wkr",
        "/ chunked, 1 wkr",
        "mean SSIM"
    );
    for m in &measured {
        let took = median(&m.seconds);
        let ssim = mean_ssim(&m.mp4, &source).await?;
        let per_chunked = chunked_one.map_or("-".to_owned(), |c| format!("{:.2}", took / c));
        println!(
            "{:>8} | {:>7} | {:>21.1}s | {:>16.2} | {:>17} | {:>9.6}",
            m.label,
            m.workers,
            took,
            took / whole,
            per_chunked,
            ssim
        );
        println!(
            "         rounds: {}",
            m.seconds
                .iter()
                .map(|s| format!("{s:.1}s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// Confirms `source` `args.rounds` times (one after the other) with `workers` worker processes
/// that split it (`chunked`) or encode it whole; keeps the first round's MP4 under `keep`.
async fn measure(
    args: &E2eBenchArgs,
    source: &Path,
    workers: u32,
    chunked: bool,
    cores: usize,
    keep: &Path,
) -> anyhow::Result<Measured> {
    let label = if chunked { "chunked" } else { "single" };
    let scratch =
        Scratch::create(&args.server.database_url, &format!("long{label}{workers}")).await?;
    let s3 = BenchS3::start().await?;
    let ctx = client_context(&scratch.url, &s3).await?;
    let (owner, _) = app::users::create_user(&ctx.db, "bench").await?;
    let work = tempfile::tempdir()?;
    // One FFmpeg call of the single job encodes the whole video on one core: its limits
    // are lifted so the baseline is not cut short (the chunked path needs no such thing).
    let mut env = vec![
        ("VIDQ_FFMPEG_TIMEOUT_SECS", "7200"),
        ("VIDQ_DEADLINE_SECS", "7200"),
    ];
    if !chunked {
        env.push(("VIDQ_CHUNK_MIN_SOURCE_SECS", "0"));
    }
    let mut children = Vec::new();
    for n in 0..workers {
        children.push(pinned_worker(
            n,
            cores,
            &scratch.url,
            &s3,
            work.path(),
            &env,
        )?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // workers connected and listening
    let mut seconds = Vec::new();
    let mut first = None;
    for round in 0..args.rounds {
        let size = i64::try_from(std::fs::metadata(source)?.len())?;
        let created =
            app::uploads::create_upload(&ctx, owner, "long.mp4", "video/mp4", size).await?;
        ctx.storage
            .put_file(&created.upload.object_key, source, "video/mp4")
            .await?;
        let video =
            match app::uploads::confirm_upload(&ctx, owner, UploadId(created.upload.id)).await? {
                Confirmed::Created(v) | Confirmed::AlreadyConfirmed(v) => VideoId(v.video.id),
            };
        let confirmed = Instant::now();
        let view = loop {
            tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
            let view = app::videos::get_video(&ctx, owner, video).await?;
            match view.status {
                VideoStatus::Ready => break view,
                VideoStatus::Failed => anyhow::bail!("video failed: {:?}", view.video.error_code),
                _ => {}
            }
        };
        let took = confirmed.elapsed().as_secs_f64();
        println!(
            "{label}, {workers} worker(s), round {}: confirm->READY {took:.1} s",
            round + 1
        );
        seconds.push(took);
        if first.is_none() {
            let mp4 = keep.join(format!("{label}_{workers}.mp4"));
            let mut conn = ctx.db.get().await?;
            let key = crate::db::videos::find_owned(&mut conn, owner, video)
                .await?
                .and_then(|(row, _, _)| row.mp4_key)
                .context("a READY video has an MP4")?;
            ensure!(
                ctx.storage.download_to_file(&key, &mp4).await?.is_some(),
                "the MP4 is in storage"
            );
            first = Some(mp4);
        }
        drop(view);
    }
    stop_workers(children).await;
    drop(ctx);
    s3.stop().await;
    scratch.drop_now().await;
    Ok(Measured {
        label,
        workers,
        seconds,
        mp4: first.context("at least one round")?,
    })
}

/// Mean SSIM (all planes) of `encoded` against `source` scaled to its size, frames paired by
/// time from each one's first frame.
async fn mean_ssim(encoded: &Path, source: &Path) -> anyhow::Result<f64> {
    let graph = "[0:v]format=yuv420p,setpts=PTS-STARTPTS[a];\
                 [1:v][a]scale2ref[b][a2];[b]format=yuv420p,setpts=PTS-STARTPTS[b2];\
                 [a2][b2]ssim";
    let out = tokio::process::Command::new("ffmpeg")
        .args(["-nostdin", "-hide_banner", "-i"])
        .arg(encoded)
        .arg("-i")
        .arg(source)
        .args(["-lavfi", graph, "-f", "null", "-"])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "ffmpeg's ssim on {}",
        encoded.display()
    );
    let log = String::from_utf8_lossy(&out.stderr);
    log.lines()
        .filter_map(|l| l.split(" All:").nth(1))
        .next_back()
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .context("ffmpeg printed no SSIM")
}
