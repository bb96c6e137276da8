//! `vidq probe FILE` and `vidq encode FILE --out DIR`: the worker's own probe and encode,
//! run on a local file, for operators checking what vidq will make of an input.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::adapters::ffmpeg::{encode, probe};
use crate::config::MediaArgs;
use crate::domain::media::MediaError;

/// `vidq probe`.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The file to inspect.
    pub file: PathBuf,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub media: MediaArgs,
}

/// `vidq encode`.
#[derive(Debug, Args)]
pub struct EncodeArgs {
    /// The original to encode.
    pub file: PathBuf,
    /// Directory for the outputs (`hls/`, `video.mp4`, `thumb.jpg`); created if missing.
    #[arg(long)]
    pub out: PathBuf,
    /// Probe, then print the exact ffprobe/ffmpeg command lines the encode would run (as JSON
    /// arrays) instead of running them, creating the directories they write into: for
    /// comparing with plain FFmpeg.
    #[arg(long)]
    pub print_commands: bool,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub media: MediaArgs,
}

/// Prints the probe's `MediaInfo` as JSON, or the typed refusal (exit status 1).
pub async fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    let config = crate::adapters::ffmpeg::MediaConfig::from(&args.media);
    match probe::probe(&config, &args.file, &CancellationToken::new()).await {
        Ok(info) => {
            println!("{}", serde_json::to_string_pretty(&info)?);
            Ok(())
        }
        Err(err) => refuse(&err),
    }
}

/// Probes and encodes like a worker does, into a local directory; prints a JSON summary.
pub async fn encode(args: EncodeArgs) -> anyhow::Result<()> {
    let config = crate::adapters::ffmpeg::MediaConfig::from(&args.media);
    let cancel = crate::shutdown::on_signals();
    let started = Instant::now();
    let info = match probe::probe(&config, &args.file, &cancel).await {
        Ok(info) => info,
        Err(err) => return refuse(&err),
    };
    std::fs::create_dir_all(&args.out)?;
    let timeline = match encode::measured_timeline(&config, &args.file, &args.out, &cancel).await {
        Ok(timeline) => timeline,
        Err(err) => return refuse(&err),
    };
    let info = match &timeline {
        Some(line) => info.timed_by(line),
        None => info,
    };
    let probed = started.elapsed();
    if args.print_commands {
        // The commands write into these directories, as the encode would create them.
        for rung in encode::rungs(&config, &info) {
            std::fs::create_dir_all(args.out.join("hls").join(&rung.prefix))?;
        }
        let commands = json!({
            "probe": command(&config.ffprobe, &probe::args(&args.file)),
            "timing": command(
                &config.ffprobe,
                &crate::adapters::ffmpeg::split::timing_args(&args.file, &args.out.join("timing.json")),
            ),
            // One call for the whole ladder (one decode); a list, as callers read it.
            "encode": [command(
                &config.ffmpeg,
                &encode::encode_args(&config, &info, timeline.as_ref(), &args.file, &args.out,
                    &encode::rungs(&config, &info)),
            )],
            "thumbnail": command(&config.ffmpeg, &crate::adapters::ffmpeg::thumbnail::thumbnail_args(
                &config,
                crate::adapters::ffmpeg::thumbnail::thumbnail_secs(&info, timeline.as_ref()),
                &args.out.join(crate::domain::keys::outputs::MP4),
                &args.out,
            )),
        });
        println!("{}", serde_json::to_string_pretty(&commands)?);
        return Ok(());
    }
    let files = match encode::encode(
        &config,
        &info,
        timeline.as_ref(),
        &args.file,
        &args.out,
        &cancel,
    )
    .await
    {
        Ok(files) => files,
        Err(err) => return refuse(&err),
    };
    let summary = json!({
        "media": info,
        "outputs": {
            "playlist": files.playlist,
            "renditions": files.renditions.iter().map(|r| json!({
                "playlist": r.playlist,
                "width": r.width,
                "height": r.height,
                "segments": r.segments.len(),
            })).collect::<Vec<_>>(),
            "mp4": files.mp4,
            "thumbnail": files.thumbnail,
        },
        "probe_seconds": probed.as_secs_f64(),
        "total_seconds": started.elapsed().as_secs_f64(),
        "vidq_peak_rss_kib": peak_rss_kib(),
    });
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(())
}

fn command(program: &std::path::Path, args: &[std::ffi::OsString]) -> Vec<String> {
    std::iter::once(program.as_os_str())
        .chain(args.iter().map(|a| a.as_os_str()))
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

fn refuse(err: &MediaError) -> anyhow::Result<()> {
    println!("{}", json!({ "error": err }));
    Err(anyhow::anyhow!("{err}"))
}

/// This process's own peak resident memory (FFmpeg's is its own process's).
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
