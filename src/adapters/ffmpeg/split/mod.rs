//! The FFmpeg calls of a split video (docs/architecture.md, "One long video on every
//! worker"): the timing probe that plans it, a chunk (exactly its frames of the grid, every
//! rendition from one decode, video-only MPEG-TS), the audio (the whole track once, on the
//! video's clock), and the stitch (the chunks joined byte for byte and muxed once with the
//! audio into the usual HLS renditions, MP4 and thumbnail), with the checks that gate READY.
//!
//! Timestamps are never computed by concatenation: every chunk carries the grid's own
//! timestamps (frame index x frame duration, shifted by [`TS_OFFSET_SECS`] so B-frames never
//! need a negative decode time), and the stitch shifts them back once.

mod check;
mod timing;

pub use check::{Packet, StitchFault, check_stitched, judge};
use check::{intermediate_probe, video_packets};
pub use timing::{parse_timing, timing, timing_args};

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::encode::{EncodedFiles, classify_encode, collect, hardened_input, master_playlist};
// The audio every split video gets is a whole encode's: AAC stereo at 48 kHz.
use super::filters::AUDIO_RATE;
use super::{MediaConfig, process};
use crate::domain::failure::FailureCode;
use crate::domain::keys::outputs;
use crate::domain::media::MediaError;
use crate::domain::split::{ChunkRange, SplitPlan};

/// Seconds added to every intermediate's timestamps (and taken off at the stitch): a chunk's
/// first frames are B-frame references decoded before they are shown, so their decode times
/// come before the chunk's first presentation time, which is 0 for the first chunk.
pub const TS_OFFSET_SECS: u32 = 10;

/// Samples in one AAC frame: the audio may end up to one of these away from the video.
const AAC_FRAME_SAMPLES: i64 = 1024;

fn io(what: &str) -> impl Fn(std::io::Error) -> MediaError + '_ {
    move |e| MediaError::retryable(FailureCode::IoError, format!("{what}: {e}"))
}

/// x264 settings every chunk and every rendition share, so that chunks encoded on different
/// nodes join into one valid stream: closed GOPs, no scene-cut keyframes (keyframes only where
/// forced, on the segment grid), and `stitchable` headers.
fn x264(config: &MediaConfig) -> Vec<String> {
    [
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-crf",
        "23",
        "-profile:v",
        "high",
        "-pix_fmt",
        "yuv420p",
        "-flags",
        "+cgop",
        "-sc_threshold",
        "0",
        "-x264-params",
        "stitchable=1",
        "-threads",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain(std::iter::once(config.threads.to_string()))
    .collect()
}

/// An intermediate's muxer: MPEG-TS with no added delay, timestamps shifted by
/// [`TS_OFFSET_SECS`].
fn ts_muxer() -> Vec<String> {
    [
        "-f",
        "mpegts",
        "-muxdelay",
        "0",
        "-muxpreload",
        "0",
        "-mpegts_flags",
        "+initial_discontinuity",
        "-output_ts_offset",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain(std::iter::once(TS_OFFSET_SECS.to_string()))
    .collect()
}

/// The filter graph of chunk `range`: the source put on the grid
/// ([`super::filters::grid_filter`]), exactly the range's frames kept, then one scale per
/// rendition from one decode. A chunk whose decode starts at the beginning (`held_from_origin`)
/// holds the first frame back to the origin, as the whole encode does.
fn chunk_graph(plan: &SplitPlan, range: ChunkRange, held_from_origin: bool) -> String {
    let outputs = plan.short_sides.len();
    let mut graph = format!(
        "[0:v:0]{grid},trim=start_pts={first}:end_pts={end},format=yuv420p,split={outputs}",
        grid = super::filters::grid_filter(
            plan.rate,
            plan.origin_secs,
            held_from_origin,
            plan.hold_secs
        ),
        first = range.first,
        end = range.end,
    );
    for n in 0..outputs {
        graph.push_str(&format!("[s{n}]"));
    }
    for (n, side) in plan.short_sides.iter().enumerate() {
        graph.push_str(&format!(
            ";[s{n}]{}[v{n}]",
            super::filters::scale_filter(*side)
        ));
    }
    graph
}

/// The times of the keyframes a chunk forces: each segment start in it. FFmpeg turns each
/// time into a frame of the encoder's time base (one frame, the grid's) by rounding to the
/// nearest, so the exact time of the frame names that frame; a time half a frame early would
/// round to the frame before it.
fn keyframe_times(plan: &SplitPlan, range: ChunkRange) -> String {
    plan.segment_starts_in(range)
        .iter()
        .map(|&frame| format!("{:.6}", plan.rate.time_of(frame)))
        .collect::<Vec<_>>()
        .join(",")
}

/// One chunk's command line: `outputs[n]` gets rendition `n` (`plan.short_sides[n]`).
pub fn chunk_args(
    config: &MediaConfig,
    plan: &SplitPlan,
    range: ChunkRange,
    input: &Path,
    outputs: &[PathBuf],
) -> Vec<OsString> {
    let seek = plan.seek(range.part);
    let mut args = hardened_input(config, input, None);
    // The source's own timestamps through the seek: the graph puts them on the grid.
    let at_input = args.len() - 2;
    // A chunk past a stream's last decodable frame reads mostly packets that fail to decode
    // (it holds that last frame); FFmpeg would give up on the share of failures (exit 69).
    // The chunk's frame count is checked whatever the decoder met, so no failure goes unseen.
    let mut before_input: Vec<OsString> =
        vec!["-max_error_rate".into(), "1".into(), "-copyts".into()];
    if let Some(seconds) = seek {
        before_input.extend(source_seek(seconds));
    }
    args.splice(at_input..at_input, before_input);
    args.push("-filter_complex".into());
    args.push(chunk_graph(plan, range, seek.is_none()).into());
    let keyframes = keyframe_times(plan, range);
    for (n, out) in outputs.iter().enumerate() {
        let mut output: Vec<String> = vec!["-map".into(), format!("[v{n}]")];
        output.extend(x264(config));
        output.extend(
            [
                "-force_key_frames",
                &keyframes,
                "-fps_mode",
                "passthrough",
                "-an",
                "-sn",
                "-dn",
            ]
            .map(str::to_owned),
        );
        output.extend(ts_muxer());
        args.extend(output.into_iter().map(OsString::from));
        args.push(out.into());
    }
    args
}

/// An input seek to `seconds` on the source's own clock (not from its container's start, as
/// `-ss` alone counts), landing on the keyframe at or before it with every frame from there
/// kept: the graph's `trim` makes the cut, on the grid.
fn source_seek(seconds: f64) -> Vec<OsString> {
    vec![
        "-seek_timestamp".into(),
        "1".into(),
        "-noaccurate_seek".into(),
        "-ss".into(),
        format!("{seconds:.6}").into(),
    ]
}

/// Encodes chunk `range` of `input` into one TS per rendition under `out`; their paths,
/// rendition order. Each is checked: exactly the range's frames, the first a keyframe; a
/// chunk that fails a check is `Ok(Err(what))`: encoding it again would decode the same
/// frames, so the video is left to the whole encode.
pub async fn encode_chunk(
    config: &MediaConfig,
    plan: &SplitPlan,
    range: ChunkRange,
    input: &Path,
    out: &Path,
    cancel: &CancellationToken,
) -> Result<Result<Vec<PathBuf>, String>, MediaError> {
    tokio::fs::create_dir_all(out)
        .await
        .map_err(io("local disk"))?;
    let outputs: Vec<PathBuf> = (0..plan.short_sides.len())
        .map(|n| out.join(format!("v{n}.ts")))
        .collect();
    process::run(
        &config.ffmpeg,
        &chunk_args(config, plan, range, input, &outputs),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify_encode(err, input))?;
    let expected = range.end - range.first;
    for path in &outputs {
        let frames = video_packets(config, path, out, cancel).await?;
        let wrong = if frames.len() as i64 != expected {
            Some(format!("{} frames where {expected} were due", frames.len()))
        } else if !frames.first().is_some_and(|p| p.key) {
            Some("it does not start with a keyframe".to_owned())
        } else {
            None
        };
        if let Some(wrong) = wrong {
            let rendition = path.file_name().unwrap_or_default().to_string_lossy();
            return Ok(Err(format!("chunk {} ({rendition}): {wrong}", range.part)));
        }
    }
    Ok(Ok(outputs))
}

/// The audio's command line: the first audio stream on the video's clock
/// ([`super::filters::audio_filter`]: a late start filled with silence, all of a long track
/// kept, a short one padded to the video's length), as AAC in TS.
pub fn audio_args(
    config: &MediaConfig,
    plan: &SplitPlan,
    input: &Path,
    out: &Path,
) -> Vec<OsString> {
    let samples = plan.audio_samples(AUDIO_RATE);
    let mut args = hardened_input(config, input, None);
    let at_input = args.len() - 2;
    args.insert(at_input, "-copyts".into());
    let filter = super::filters::audio_filter(plan.origin_secs, samples);
    let mut output: Vec<String> = ["-map", "0:a:0", "-vn", "-sn", "-dn", "-af"]
        .map(str::to_owned)
        .to_vec();
    output.push(filter);
    output.extend(
        [
            "-c:a", "aac", "-b:a", "128k", "-ar", "48000", "-ac", "2", "-threads",
        ]
        .map(str::to_owned),
    );
    output.push(config.threads.to_string());
    output.extend(ts_muxer());
    args.extend(output.into_iter().map(OsString::from));
    args.push(out.into());
    args
}

/// Encodes the whole audio of `input` into `out` (one TS).
pub async fn encode_audio(
    config: &MediaConfig,
    plan: &SplitPlan,
    input: &Path,
    out: &Path,
    cancel: &CancellationToken,
) -> Result<(), MediaError> {
    process::run(
        &config.ffmpeg,
        &audio_args(config, plan, input, out),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify_encode(err, input))?;
    if !tokio::fs::try_exists(out).await.unwrap_or(false) {
        return Err(super::encode::missing("audio"));
    }
    Ok(())
}

/// The stitch of one rendition: its chunks joined byte for byte (`concat:` reads them as one
/// stream, so no timestamp is recomputed), the audio beside them, stream-copied into the
/// rendition's fMP4 HLS and, for the top rendition, the MP4 with `moov` first.
pub fn stitch_args(
    segment_secs: u32,
    chunks: &[PathBuf],
    audio: Option<&Path>,
    hls_dir: &Path,
    mp4: Option<&Path>,
) -> Vec<OsString> {
    let joined = chunks
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("|");
    let mut args: Vec<OsString> = Vec::new();
    let input = |args: &mut Vec<OsString>, url: String| {
        for s in [
            "-protocol_whitelist",
            "concat,file",
            "-format_whitelist",
            "mpegts",
            "-copyts",
            "-i",
        ] {
            args.push(s.into());
        }
        args.push(url.into());
    };
    for s in ["-nostdin", "-hide_banner", "-loglevel", "error", "-y"] {
        args.push(s.into());
    }
    input(&mut args, format!("concat:{joined}"));
    if let Some(audio) = audio {
        input(&mut args, audio.to_string_lossy().into_owned());
    }
    let maps = |args: &mut Vec<OsString>| {
        args.extend(["-map", "0:v:0"].map(OsString::from));
        if audio.is_some() {
            args.extend(["-map", "1:a:0", "-bsf:a", "aac_adtstoasc"].map(OsString::from));
        }
        args.extend(["-c", "copy", "-map_metadata", "-1", "-output_ts_offset"].map(OsString::from));
        args.push(format!("-{TS_OFFSET_SECS}").into());
    };
    maps(&mut args);
    // The plan's segment length: the chunks' keyframes are on its grid, whatever this node's
    // own setting says.
    let segment = segment_secs.max(1).to_string();
    for s in [
        "-f",
        "hls",
        "-hls_time",
        &segment,
        "-hls_playlist_type",
        "vod",
        "-hls_segment_type",
        "fmp4",
        "-hls_fmp4_init_filename",
        "init.mp4",
        "-hls_flags",
        "independent_segments",
        "-hls_segment_filename",
    ] {
        args.push(s.into());
    }
    args.push(hls_dir.join("seg_%05d.m4s").into());
    args.push(hls_dir.join("index.m3u8").into());
    if let Some(mp4) = mp4 {
        maps(&mut args);
        args.extend(["-movflags", "+faststart", "-f", "mp4"].map(OsString::from));
        args.push(mp4.into());
    }
    args
}

/// Stitches the chunks (`chunks[rendition][part]`) and the audio into `out`: every rendition's
/// HLS, the MP4 (top rendition), the master playlist of a ladder and the thumbnail, laid out as
/// a whole encode lays them out.
pub async fn stitch(
    config: &MediaConfig,
    plan: &SplitPlan,
    chunks: &[Vec<PathBuf>],
    audio: Option<&Path>,
    out: &Path,
    cancel: &CancellationToken,
) -> Result<EncodedFiles, MediaError> {
    let ladder = chunks.len() > 1;
    let mp4 = out.join(outputs::MP4);
    let mut renditions = Vec::with_capacity(chunks.len());
    for (n, files) in chunks.iter().enumerate() {
        let prefix = if ladder {
            format!("v{n}/")
        } else {
            String::new()
        };
        let dir = out.join("hls").join(&prefix);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(io("local disk"))?;
        let top = (n == 0).then_some(mp4.as_path());
        process::run(
            &config.ffmpeg,
            &stitch_args(plan.segment_secs, files, audio, &dir, top),
            config.call_timeout,
            cancel,
        )
        .await
        .map_err(|err| classify_encode(err, &dir))?;
        let (width, height) = frame_size(config, &files[0], cancel).await?;
        renditions.push(collect(&dir, &prefix, width, height).await?);
    }
    // The middle of the source's picture, not of its sound nor of the last frame held for it.
    let at = (plan.rate.time_of(plan.frames) - plan.hold_secs) / 2.0;
    let thumbnail = super::thumbnail::thumbnail(config, at, &mp4, out, cancel).await?;
    let playlist = out.join(outputs::PLAYLIST);
    if ladder {
        let master = master_playlist(&renditions, plan.media.duration_ms)
            .await
            .map_err(io("local disk"))?;
        tokio::fs::write(&playlist, master)
            .await
            .map_err(io("local disk"))?;
    }
    Ok(EncodedFiles {
        dir: out.to_owned(),
        playlist,
        renditions,
        mp4,
        thumbnail,
    })
}

/// A rendition's frame size, read from its first chunk.
async fn frame_size(
    config: &MediaConfig,
    chunk: &Path,
    cancel: &CancellationToken,
) -> Result<(i32, i32), MediaError> {
    #[derive(Deserialize)]
    struct Size {
        streams: Vec<Dims>,
    }
    #[derive(Deserialize)]
    struct Dims {
        width: i32,
        height: i32,
    }
    let mut args = intermediate_probe(chunk);
    args.splice(
        args.len() - 1..args.len() - 1,
        ["-show_entries", "stream=width,height", "-of", "json"].map(OsString::from),
    );
    let json = process::run(&config.ffprobe, &args, config.call_timeout, cancel)
        .await
        .map_err(|err| classify_encode(err, chunk))?;
    let size: Size = serde_json::from_slice(&json).map_err(|e| {
        MediaError::retryable(FailureCode::EncodeFailed, format!("chunk size: {e}"))
    })?;
    let dims = size
        .streams
        .first()
        .ok_or_else(|| super::encode::missing("video stream in a chunk"))?;
    Ok((dims.width, dims.height))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::split::{PlannedMedia, Rate};

    /// A 30 fps plan of `frames` frames in two chunks, with two renditions.
    pub(crate) fn plan(frames: i64) -> SplitPlan {
        SplitPlan {
            rate: Rate { num: 30, den: 1 },
            origin_secs: 0.0,
            frames,
            chunk_starts: vec![0, 240],
            seeks: vec![None, Some(7.0)],
            hold_secs: 0.0,
            audio_secs: 0.0,
            segment_secs: 4,
            short_sides: vec![360, 180],
            has_audio: true,
            media: PlannedMedia {
                container: "mov,mp4,m4a,3gp,3g2,mj2".into(),
                duration_ms: frames * 1000 / 30,
                video_codec: "h264".into(),
                width: 640,
                height: 360,
                fps: 30.0,
                audio_codec: Some("aac".into()),
            },
        }
    }

    #[test]
    fn a_chunk_keeps_exactly_its_frames_with_keyframes_on_the_segment_grid() {
        let plan = plan(300);
        let range = plan.chunk(1).unwrap();
        let args = chunk_args(
            &MediaConfig::default(),
            &plan,
            range,
            Path::new("/in/orig"),
            &[PathBuf::from("/out/v0.ts"), PathBuf::from("/out/v1.ts")],
        );
        let line = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(
            line.contains(
                "-max_error_rate 1 -copyts -seek_timestamp 1 -noaccurate_seek -ss 7.000000 -i /in/orig"
            ),
            "{line}"
        );
        assert!(line.contains("trim=start_pts=240:end_pts=300"), "{line}");
        assert!(line.contains("split=2[s0][s1]"), "{line}");
        assert!(line.contains("-force_key_frames 8.000000 "), "{line}");
        assert_eq!(line.matches("-map [v").count(), 2, "{line}");
        assert!(line.ends_with("-output_ts_offset 10 /out/v1.ts"), "{line}");
    }
}
