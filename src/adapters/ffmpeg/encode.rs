//! The encode: one FFmpeg call that decodes once and writes both the HLS rendition (fMP4
//! segments, VOD playlist) and a progressive MP4 with `moov` first, through the tee muxer;
//! and one call for the thumbnail.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::probe::classify;
use super::process;
use super::{DEMUXER_ALLOW_LIST, MediaConfig, PROTOCOL_ALLOW_LIST};
use crate::domain::keys::outputs;
use crate::domain::media::{MediaError, MediaInfo};

/// Widest thumbnail.
const THUMBNAIL_MAX_WIDTH: i32 = 640;

/// The files one encode produced, named as they will be under the attempt's S3 prefix.
#[derive(Clone, Debug)]
pub struct EncodedFiles {
    /// The directory they are in.
    pub dir: PathBuf,
    /// `hls/init.mp4`.
    pub init: PathBuf,
    /// `hls/seg_00000.m4s`, ... in playback order.
    pub segments: Vec<PathBuf>,
    /// `hls/index.m3u8`.
    pub playlist: PathBuf,
    /// `video.mp4`.
    pub mp4: PathBuf,
    /// `thumb.jpg`.
    pub thumbnail: PathBuf,
}

/// Input options every FFmpeg call on an original takes: local files only, accepted
/// demuxers only, and a cap on the frame size the decoder may allocate.
fn hardened_input(config: &MediaConfig, input: &Path, seek_seconds: Option<f64>) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |s: &str| args.push(s.into());
    push("-nostdin");
    push("-hide_banner");
    push("-loglevel");
    push("error");
    push("-y");
    push("-protocol_whitelist");
    push(PROTOCOL_ALLOW_LIST);
    push("-format_whitelist");
    push(DEMUXER_ALLOW_LIST);
    push("-max_pixels");
    push(&config.limits.max_pixels().to_string());
    if let Some(seconds) = seek_seconds {
        push("-ss");
        push(&format!("{seconds:.3}"));
    }
    push("-i");
    args.push(input.into());
    args
}

/// The encode's command line: H.264 high/yuv420p CRF 23 veryfast, keyframes on segment
/// boundaries, AAC stereo, metadata stripped, at most `max_output_height` on the short side.
pub fn encode_args(
    config: &MediaConfig,
    info: &MediaInfo,
    input: &Path,
    out: &Path,
) -> Vec<OsString> {
    let mut args = hardened_input(config, input, None);
    let segment = config.segment_seconds.max(1);
    let gop = if info.fps > 0.0 {
        ((info.fps * f64::from(segment)).round() as i64).max(1)
    } else {
        250
    };
    let short_side = config.max_output_height;
    // Landscape: cap the height; portrait: cap the width. -2 keeps the aspect ratio with an
    // even size, which yuv420p needs.
    let scale = format!(
        "scale=w='if(gte(iw,ih),-2,min({short_side},iw))':h='if(gte(iw,ih),min({short_side},ih),-2)',format=yuv420p"
    );
    let hls_dir = out.join("hls");
    let tee = format!(
        "[f=hls:hls_time={segment}:hls_playlist_type=vod:hls_segment_type=fmp4:hls_fmp4_init_filename=init.mp4:\
         hls_segment_filename={seg}:hls_flags=independent_segments]{playlist}|\
         [f=mp4:movflags=+faststart]{mp4}",
        seg = tee_escape(&hls_dir.join("seg_%05d.m4s")),
        playlist = tee_escape(&out.join(outputs::PLAYLIST)),
        mp4 = tee_escape(&out.join(outputs::MP4)),
    );
    let mut push = |s: &str| args.push(s.into());
    for s in [
        "-map",
        "0:v:0",
        "-map",
        "0:a:0?",
        "-map_metadata",
        "-1",
        "-map_chapters",
        "-1",
        "-sn",
        "-dn",
    ] {
        push(s);
    }
    for s in [
        "-vf",
        &scale,
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-crf",
        "23",
        "-profile:v",
        "high",
    ] {
        push(s);
    }
    for s in [
        "-pix_fmt",
        "yuv420p",
        "-g",
        &gop.to_string(),
        "-keyint_min",
        &gop.to_string(),
        "-sc_threshold",
        "0",
    ] {
        push(s);
    }
    push("-force_key_frames");
    push(&format!("expr:gte(t,n_forced*{segment})"));
    for s in ["-c:a", "aac", "-b:a", "128k", "-ac", "2", "-ar", "48000"] {
        push(s);
    }
    // Both outputs of the tee share the encoders, so the codec headers must be global.
    for s in [
        "-flags",
        "+global_header",
        "-threads",
        &config.threads.to_string(),
        "-f",
        "tee",
        &tee,
    ] {
        push(s);
    }
    args
}

/// Escapes a path for the tee muxer's output list.
fn tee_escape(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, '\\' | ':' | '|' | '[' | ']' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The thumbnail's command line: one frame from the middle, at most 640 wide.
pub fn thumbnail_args(
    config: &MediaConfig,
    info: &MediaInfo,
    input: &Path,
    out: &Path,
) -> Vec<OsString> {
    let middle = info.duration_ms as f64 / 2000.0;
    let mut args = hardened_input(config, input, Some(middle));
    let scale = format!("scale='min({THUMBNAIL_MAX_WIDTH},iw)':-2");
    for s in [
        "-map",
        "0:v:0",
        "-frames:v",
        "1",
        "-vf",
        &scale,
        "-q:v",
        "3",
        "-map_metadata",
        "-1",
    ] {
        args.push(s.into());
    }
    args.push(out.join(outputs::THUMBNAIL).into());
    args
}

/// Encodes `input` into `out` (which must be empty) and makes the thumbnail.
pub async fn encode(
    config: &MediaConfig,
    info: &MediaInfo,
    input: &Path,
    out: &Path,
    cancel: &CancellationToken,
) -> Result<EncodedFiles, MediaError> {
    let io = |e: std::io::Error| MediaError::retryable("io_error", format!("local disk: {e}"));
    tokio::fs::create_dir_all(out.join("hls"))
        .await
        .map_err(io)?;
    process::run(
        &config.ffmpeg,
        &encode_args(config, info, input, out),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify_encode(err, input))?;
    process::run(
        &config.ffmpeg,
        &thumbnail_args(config, info, input, out),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify_encode(err, input))?;
    collect(out).await
}

/// An encode that fails on a file the probe accepted is usually the node (disk, memory, a
/// kill), so it is retried; the three attempts bound the cost of a file that is corrupt
/// past its headers.
fn classify_encode(err: process::ProcessError, input: &Path) -> MediaError {
    match classify(err, input, "encode_timeout") {
        MediaError {
            code: "invalid_media",
            message,
            ..
        } => MediaError::retryable("encode_failed", message),
        other => other,
    }
}

/// Reads the playlist FFmpeg wrote and checks that everything it references exists.
async fn collect(out: &Path) -> Result<EncodedFiles, MediaError> {
    let missing =
        |what: &str| MediaError::retryable("encode_failed", format!("the encoder wrote no {what}"));
    let playlist = out.join(outputs::PLAYLIST);
    let text = tokio::fs::read_to_string(&playlist)
        .await
        .map_err(|_| missing("playlist"))?;
    let hls = out.join("hls");
    let segments: Vec<PathBuf> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|name| hls.join(name))
        .collect();
    if segments.is_empty() {
        return Err(missing("segment"));
    }
    let files = EncodedFiles {
        dir: out.to_owned(),
        init: out.join(outputs::INIT),
        segments,
        playlist,
        mp4: out.join(outputs::MP4),
        thumbnail: out.join(outputs::THUMBNAIL),
    };
    for path in [&files.init, &files.mp4, &files.thumbnail]
        .into_iter()
        .chain(&files.segments)
    {
        if !tokio::fs::try_exists(path).await.unwrap_or(false) {
            return Err(missing(
                &path.file_name().unwrap_or_default().to_string_lossy(),
            ));
        }
    }
    Ok(files)
}
