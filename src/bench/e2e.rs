//! `vidq bench e2e`: the end-to-end protocol. Three 720p clips (10.08 s, 15.08 s, 19.10 s)
//! confirmed in parallel, their status polled every 500 ms from the confirm to READY, three
//! rounds, with 1 and then 2 `vidq worker` processes, each pinned to its own core with
//! `taskset` and FFmpeg limited to one thread, standing in for separate small machines.
//! Printed next to each: the same FFmpeg work (probe, encode, thumbnail) run as plain command
//! lines on one core, and the protocol's checks (all READY and COMPLETED, no lost job, no duplicate notification, nothing left
//! unfinished after the workers stop).

use super::stats::median;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::Scratch;
use crate::adapters::ffmpeg::{MediaConfig, encode, probe};
use crate::app::{self, AppContext, uploads::Confirmed};
use crate::config::UploadConfig;
use crate::domain::ids::VideoId;
use crate::domain::video::VideoStatus;

/// The protocol's inputs, in seconds.
const CLIPS: [f64; 3] = [10.08, 15.08, 19.10];

/// `vidq bench e2e`.
#[derive(Debug, Args)]
pub struct E2eBenchArgs {
    /// Worker-process counts to measure (comma-separated).
    #[arg(long, alias = "workers", value_delimiter = ',', default_value = "1,2")]
    pub nodes: Vec<u32>,
    /// Instead of the three clips: one upload this many seconds long, encoded as one job on one
    /// worker, then split into chunks on each worker count (`--workers`).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..=14_400))]
    pub long: Option<u32>,
    /// Rounds per node count (each round confirms the three clips together).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Status poll interval, as the protocol's client (ms).
    #[arg(long = "poll-ms", default_value_t = 500)]
    pub poll_ms: u64,
    /// Where the generated clips are kept.
    #[arg(long, default_value = "target/bench-clips")]
    pub clips: PathBuf,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: super::ServerArgs,
}

fn clip(dir: &Path, seconds: f64) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("seed_{seconds:.2}s_720p.mp4"));
    if !path.exists() {
        std::fs::create_dir_all(dir)?;
        let status = std::process::Command::new("ffmpeg")
            .args(["-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"])
            .arg(format!("testsrc2=size=1280x720:rate=30:duration={seconds}"))
            .args(["-f", "lavfi", "-i"])
            .arg(format!("sine=frequency=440:duration={seconds}"))
            .args([
                "-c:v",
                "libx264",
                "-preset",
                "medium",
                "-pix_fmt",
                "yuv420p",
                "-c:a",
                "aac",
                "-shortest",
            ])
            .arg(&path)
            .status()
            .context("running ffmpeg to make the clips")?;
        ensure!(status.success(), "ffmpeg could not make {}", path.display());
    }
    Ok(path)
}

/// The worker's own FFmpeg work on `clip` (probe, timing probe, encode, thumbnail: four
/// calls), run as plain command lines on core 0 with one thread.
async fn plain_ffmpeg_seconds(clip: &Path) -> anyhow::Result<f64> {
    let config = MediaConfig {
        threads: 1,
        ..MediaConfig::default()
    };
    let info = probe::probe(&config, clip, &CancellationToken::new()).await?;
    let out = tempfile::tempdir()?;
    std::fs::create_dir_all(out.path().join("hls"))?;
    let timeline =
        encode::measured_timeline(&config, clip, out.path(), &CancellationToken::new()).await?;
    let listing = out.path().join("timing.json");
    let mut steps = vec![
        (&config.ffprobe, probe::args(clip)),
        (
            &config.ffprobe,
            crate::adapters::ffmpeg::split::timing_args(clip, &listing),
        ),
    ];
    let rungs = encode::rungs(&config, &info);
    for rung in &rungs {
        std::fs::create_dir_all(out.path().join("hls").join(&rung.prefix))?;
    }
    steps.push((
        &config.ffmpeg,
        encode::encode_args(&config, &info, timeline.as_ref(), clip, out.path(), &rungs),
    ));
    let mp4 = out.path().join(crate::domain::keys::outputs::MP4);
    let at = crate::adapters::ffmpeg::thumbnail::thumbnail_secs(&info, timeline.as_ref());
    steps.push((
        &config.ffmpeg,
        crate::adapters::ffmpeg::thumbnail::thumbnail_args(&config, at, &mp4, out.path()),
    ));
    let started = Instant::now();
    for (program, args) in steps {
        let status = tokio::process::Command::new("taskset")
            .arg("-c")
            .arg("0")
            .arg(program)
            .args(&args)
            .stdout(std::process::Stdio::null())
            .status()
            .await?;
        ensure!(status.success(), "plain {} failed", program.display());
    }
    Ok(started.elapsed().as_secs_f64())
}

/// One video of one round.
struct Sample {
    clip: usize,
    polled: f64,
    wait: f64,
    processing: f64,
}

/// Runs the benchmark and prints its tables.
pub async fn run(args: E2eBenchArgs) -> anyhow::Result<()> {
    if let Some(seconds) = args.long {
        return super::long::run(&args, seconds).await;
    }
    let clips: Vec<PathBuf> = CLIPS
        .iter()
        .map(|s| clip(&args.clips, *s))
        .collect::<anyhow::Result<_>>()?;
    let mut plain = vec![Vec::new(); clips.len()];
    for _ in 0..args.rounds {
        for (i, clip) in clips.iter().enumerate() {
            plain[i].push(plain_ffmpeg_seconds(clip).await?);
        }
    }
    let plain: Vec<f64> = plain.into_iter().map(|v| median(&v)).collect();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "vidq bench e2e: {} rounds, status polled every {} ms, workers pinned one per core ({cores} cores), 1 FFmpeg thread",
        args.rounds, args.poll_ms
    );
    for &nodes in &args.nodes {
        let samples = run_nodes(&args, &clips, nodes, cores).await?;
        println!();
        println!("nodes={nodes}");
        println!(
            "{:>7} | {:>5} | {:>14} | {:>10} | {:>14} | {:>12} | {:>9}",
            "clip",
            "round",
            "confirm->READY",
            "queue wait",
            "claim->READY",
            "plain ffmpeg",
            "overhead"
        );
        for (n, s) in samples.iter().enumerate() {
            println!(
                "{:>6.2}s | {:>5} | {:>13.2}s | {:>9.2}s | {:>13.2}s | {:>11.2}s | {:>8.2}s",
                CLIPS[s.clip],
                n / clips.len() + 1,
                s.polled,
                s.wait,
                s.processing,
                plain[s.clip],
                s.processing - plain[s.clip]
            );
        }
        for (i, seconds) in CLIPS.iter().enumerate() {
            let of = |f: fn(&Sample) -> f64| {
                median(
                    &samples
                        .iter()
                        .filter(|s| s.clip == i)
                        .map(f)
                        .collect::<Vec<_>>(),
                )
            };
            println!(
                "median {seconds:>5.2}s clip: confirm->READY {:.2}s, claim->READY {:.2}s, plain ffmpeg {:.2}s, overhead {:+.2}s",
                of(|s| s.polled),
                of(|s| s.processing),
                plain[i],
                of(|s| s.processing) - plain[i]
            );
        }
    }
    Ok(())
}

async fn run_nodes(
    args: &E2eBenchArgs,
    clips: &[PathBuf],
    nodes: u32,
    cores: usize,
) -> anyhow::Result<Vec<Sample>> {
    let scratch = Scratch::create(&args.server.database_url, &format!("e2e{nodes}")).await?;
    let s3 = super::BenchS3::start().await?;
    let ctx = client_context(&scratch.url, &s3).await?;
    let (owner, _) = app::users::create_user(&ctx.db, "bench").await?;
    let work = tempfile::tempdir()?;
    let mut workers = Vec::new();
    for n in 0..nodes {
        workers.push(pinned_worker(
            n,
            cores,
            &scratch.url,
            &s3,
            work.path(),
            &[],
        )?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // workers connected and listening
    let idle: Vec<String> = workers.iter().map(|w| rss(w.id(), "VmRSS")).collect();

    let mut samples = Vec::new();
    for _ in 0..args.rounds {
        // Uploads first (the client's PUT), then the three confirms together.
        let mut uploads = Vec::new();
        for path in clips {
            let size = i64::try_from(std::fs::metadata(path)?.len())?;
            let created =
                app::uploads::create_upload(&ctx, owner, "clip.mp4", "video/mp4", size).await?;
            ctx.storage
                .put_file(&created.upload.object_key, path, "video/mp4")
                .await?;
            uploads.push(crate::domain::ids::UploadId(created.upload.id));
        }
        let confirms =
            futures_util::future::join_all(uploads.iter().enumerate().map(|(i, upload)| {
                let ctx = &ctx;
                async move {
                    let video = match app::uploads::confirm_upload(ctx, owner, *upload).await? {
                        Confirmed::Created(v) | Confirmed::AlreadyConfirmed(v) => {
                            VideoId(v.video.id)
                        }
                    };
                    let confirmed = Instant::now();
                    loop {
                        tokio::time::sleep(Duration::from_millis(args.poll_ms)).await;
                        let view = app::videos::get_video(ctx, owner, video).await?;
                        match view.status {
                            VideoStatus::Ready => {
                                return anyhow::Ok((i, video, confirmed.elapsed().as_secs_f64()));
                            }
                            VideoStatus::Failed => {
                                anyhow::bail!("video failed: {:?}", view.video.error_code)
                            }
                            _ => {}
                        }
                    }
                }
            }))
            .await;
        for result in confirms {
            let (clip, video, polled) = result?;
            let mut conn = ctx.db.get().await?;
            let timing = crate::db::bench::timing(&mut conn, video).await?;
            samples.push(Sample {
                clip,
                polled,
                wait: timing.wait,
                processing: timing.processing,
            });
        }
    }
    let busy: Vec<String> = workers.iter().map(|w| rss(w.id(), "VmHWM")).collect();
    println!();
    println!(
        "nodes={nodes} worker RSS: idle {} / peak over the rounds {} (the worker process itself; FFmpeg is its child)",
        idle.join(", "),
        busy.join(", ")
    );
    stop_workers(workers).await;
    let checks = check(&ctx).await?;
    println!();
    println!("nodes={nodes} checks: {checks}");
    drop(ctx);
    s3.stop().await;
    scratch.drop_now().await;
    Ok(samples)
}

/// The API's use-cases over `url` and `s3`, as the benchmark's client calls them (no HTTP
/// server: the workers are what is measured); the bucket created.
pub(super) async fn client_context(url: &str, s3: &super::BenchS3) -> anyhow::Result<AppContext> {
    let db = crate::db::connect(url, 4).await?;
    let upload = UploadConfig {
        max_upload_bytes: 1 << 30,
        upload_url_ttl_secs: 600,
        playback_url_ttl_secs: 600,
        confirm_batch_max: 64,
        confirm_committers: 2,
        max_open_uploads_per_user: 1000,
        max_open_recordings_per_user: 20,
    };
    let ctx = AppContext {
        confirms: app::confirm_batch::ConfirmBatcher::start(db.clone(), (&upload).into()),
        status_reads: app::status_reads::StatusReads::start(db.clone()),
        db,
        storage: s3.storage.clone(),
        upload,
        webhooks: crate::config::WebhookArgs::default(),
        events: app::events::EventSignal::default(),
        playback: app::playback::PlaybackSettings::generated(),
        ingest: None,
        operators: Default::default(),
        in_process_worker: None,
        ready_requires_storage: false,
        page_key: None,
    };
    ctx.storage.ensure_bucket().await?;
    Ok(ctx)
}

/// `vidq worker` number `n`, pinned to its own core (`n` modulo `cores`) with one FFmpeg
/// thread and a work directory of its own under `work`, standing in for a one-core machine;
/// `env` adds settings.
pub(super) fn pinned_worker(
    n: u32,
    cores: usize,
    url: &str,
    s3: &super::BenchS3,
    work: &Path,
    env: &[(&str, &str)],
) -> anyhow::Result<tokio::process::Child> {
    let core = n as usize % cores;
    tokio::process::Command::new("taskset")
        .arg("-c")
        .arg(core.to_string())
        .arg(std::env::current_exe()?)
        .arg("worker")
        .env("DATABASE_URL", url)
        .envs(s3.env())
        .env("VIDQ_NODE_ID", format!("node-{n}"))
        .env("VIDQ_FFMPEG_THREADS", "1")
        .env("VIDQ_WORK_DIR", work.join(format!("node-{n}")))
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .spawn()
        .context("starting a worker (is taskset installed?)")
}

/// Stops `workers` as an operator would (SIGTERM: each hands its claims back), waiting up to
/// 30 s for each.
pub(super) async fn stop_workers(workers: Vec<tokio::process::Child>) {
    for worker in &workers {
        if let Some(pid) = worker.id() {
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
    }
    for mut worker in workers {
        let _ = tokio::time::timeout(Duration::from_secs(30), worker.wait()).await;
    }
}

async fn check(ctx: &AppContext) -> anyhow::Result<String> {
    let mut conn = ctx.db.get().await?;
    let c = crate::db::bench::checks(&mut conn).await?;
    let lost = c.videos - c.ready_and_completed;
    Ok(format!(
        "{}/{} READY and COMPLETED, {lost} lost jobs, {} duplicate notifications, {} missing notifications, {} unfinished jobs after the workers stopped",
        c.ready_and_completed,
        c.videos,
        c.duplicate_notifications,
        c.missing_notifications,
        c.unfinished
    ))
}

/// A memory figure (`VmRSS`, `VmHWM`) of a process, in MiB.
fn rss(pid: Option<u32>, field: &str) -> String {
    super::stats::proc_kib(pid, field)
        .map_or_else(|| "?".to_owned(), |kib| format!("{:.1} MiB", kib / 1024.0))
}
