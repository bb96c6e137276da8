//! The hardened probe: ffprobe limited to local files and to the container demuxers vidq
//! accepts, JSON output parsed into [`MediaInfo`], then the configured limits.

use std::ffi::OsString;
use std::path::Path;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::process::{self, ProcessError};
use super::{DEMUXER_ALLOW_LIST, MediaConfig, PROTOCOL_ALLOW_LIST};
use crate::domain::media::{MediaError, MediaInfo, TOOL_FAILED};

/// Probes `input` and checks it against the limits. Refusals are permanent; a missing tool,
/// a timeout or a cancellation is retryable.
pub async fn probe(
    config: &MediaConfig,
    input: &Path,
    cancel: &CancellationToken,
) -> Result<MediaInfo, MediaError> {
    let json = process::run(&config.ffprobe, &args(input), config.call_timeout, cancel)
        .await
        .map_err(|err| {
            classify(
                err,
                input,
                crate::domain::failure::FailureCode::ProbeTimeout,
            )
        })?;
    let info = parse(&json)?;
    config.limits.check(&info)?;
    Ok(info)
}

/// The ffprobe command line for `input`.
pub fn args(input: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-v",
        "error",
        "-hide_banner",
        "-protocol_whitelist",
        PROTOCOL_ALLOW_LIST,
        "-format_whitelist",
        DEMUXER_ALLOW_LIST,
        "-show_format",
        "-show_streams",
        "-of",
        "json",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.push(input.into());
    args
}

/// Maps a child-process failure to the queue's view of it. A tool that ran and refused the
/// file is the file's fault (permanent); everything else is the node's (retryable), a tool
/// that could not run at all included (`tool_failed`, see [`could_not_run`]). The whole
/// failure (tool path, stderr) goes to the log here; the error's message is for the log too,
/// and only a refusal's last line is kept as the reason a client may read.
pub fn classify(
    err: ProcessError,
    input: &Path,
    timeout_code: crate::domain::failure::FailureCode,
) -> MediaError {
    if !matches!(err, ProcessError::Cancelled { .. }) {
        tracing::warn!(error = %crate::telemetry::error_chain(&err), "media tool failed");
    }
    if let ProcessError::Failed { status, stderr, .. } = &err
        && could_not_run(*status, stderr)
    {
        return MediaError::retryable(TOOL_FAILED, err.to_string());
    }
    match err {
        ProcessError::NotFound { .. } => MediaError::retryable(
            crate::domain::failure::FailureCode::FfmpegMissing,
            err.to_string(),
        ),
        ProcessError::Spawn { .. } => MediaError::retryable(
            crate::domain::failure::FailureCode::IoError,
            err.to_string(),
        ),
        ProcessError::TimedOut { .. } => MediaError::retryable(timeout_code, err.to_string()),
        ProcessError::Cancelled { .. } => MediaError::retryable(
            crate::domain::failure::FailureCode::Cancelled,
            err.to_string(),
        ),
        ProcessError::Failed { stderr, .. } => {
            // Paths in FFmpeg's messages are the job's own; show only the file name.
            let shown = input
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let stderr = stderr.replace(&*input.to_string_lossy(), &shown);
            let reason = stderr
                .lines()
                .last()
                .unwrap_or("unreadable input")
                .to_owned();
            MediaError::permanent(
                crate::domain::failure::FailureCode::InvalidMedia,
                format!("not a readable video: {reason}"),
            )
            .with_reason(reason)
        }
    }
}

/// What a tool prints when the node, not the file, is at fault: the loader missing a
/// library, a build without a codec vidq's own checks let through.
const NODE_FAULTS: &[&str] = &[
    "error while loading shared libraries",
    "cannot open shared object file",
    "symbol lookup error",
    "unknown encoder",
    "encoder not found",
    "not found for input stream",
    "no decoder found",
];

/// Whether a tool that ended unsuccessfully could not do its work at all, whatever the file:
/// it could not be executed (126) or found through its wrapper (127, also the loader's status
/// when a library is missing), a signal vidq did not send ended it (its own timeouts and
/// cancellations end as such, never here: this is the OOM killer or a crash), or it names a
/// missing library, codec or encoder. Such a failure is the node's, never the file's.
pub fn could_not_run(status: std::process::ExitStatus, stderr: &str) -> bool {
    use std::os::unix::process::ExitStatusExt;
    if matches!(status.code(), Some(126 | 127)) || status.signal().is_some() {
        return true;
    }
    let stderr = stderr.to_ascii_lowercase();
    NODE_FAULTS.iter().any(|fault| stderr.contains(fault))
}

#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    streams: Vec<Stream>,
    format: Option<Format>,
}

#[derive(Deserialize)]
struct Stream {
    codec_type: Option<String>,
    codec_name: Option<String>,
    width: Option<i32>,
    height: Option<i32>,
    avg_frame_rate: Option<String>,
    r_frame_rate: Option<String>,
    duration: Option<String>,
    #[serde(default)]
    disposition: Disposition,
    #[serde(default)]
    side_data_list: Vec<SideData>,
}

/// A stream's side data as ffprobe lists it: only the display matrix's rotation is read.
#[derive(Deserialize)]
pub(super) struct SideData {
    rotation: Option<f64>,
}

/// The display rotation in degrees a stream's side data gives, if any.
pub(super) fn rotation_of(side_data: &[SideData]) -> Option<f64> {
    side_data.iter().find_map(|d| d.rotation)
}

#[derive(Deserialize, Default)]
struct Disposition {
    #[serde(default)]
    attached_pic: i32,
}

#[derive(Deserialize)]
struct Format {
    format_name: Option<String>,
    duration: Option<String>,
}

/// Parses ffprobe's JSON. A file with no real video stream (audio only, or only cover art)
/// is `no_video_stream`; one without a duration or frame size is `invalid_media`.
pub fn parse(json: &[u8]) -> Result<MediaInfo, MediaError> {
    let probe: Probe = serde_json::from_slice(json).map_err(|e| {
        MediaError::permanent(
            crate::domain::failure::FailureCode::InvalidMedia,
            format!("unreadable probe output: {e}"),
        )
    })?;
    let format = probe.format.ok_or_else(|| {
        MediaError::permanent(
            crate::domain::failure::FailureCode::InvalidMedia,
            "no container format found",
        )
    })?;
    let container = format.format_name.unwrap_or_default();
    let allowed = DEMUXER_ALLOW_LIST.split(',').collect::<Vec<_>>();
    if !container.split(',').any(|name| allowed.contains(&name)) {
        return Err(MediaError::permanent(
            crate::domain::failure::FailureCode::InvalidMedia,
            format!("container {container:?} is not accepted"),
        ));
    }
    let video = probe
        .streams
        .iter()
        .find(|s| s.codec_type.as_deref() == Some("video") && s.disposition.attached_pic == 0)
        .ok_or_else(|| {
            MediaError::permanent(
                crate::domain::failure::FailureCode::NoVideoStream,
                "the file has no video stream",
            )
        })?;
    let audio = probe
        .streams
        .iter()
        .find(|s| s.codec_type.as_deref() == Some("audio"));
    let (width, height) = displayed_size(video)?;
    let seconds = format
        .duration
        .as_deref()
        .or(video.duration.as_deref())
        .and_then(|d| d.parse::<f64>().ok())
        .filter(|d| d.is_finite() && *d > 0.0)
        .ok_or_else(|| {
            MediaError::permanent(
                crate::domain::failure::FailureCode::InvalidMedia,
                "the video has no duration",
            )
        })?;
    let fps = [&video.avg_frame_rate, &video.r_frame_rate]
        .into_iter()
        .filter_map(|r| r.as_deref().and_then(parse_rate))
        .next()
        .unwrap_or(0.0);
    Ok(MediaInfo {
        container,
        duration_ms: (seconds * 1000.0).round() as i64,
        video_codec: video.codec_name.clone().unwrap_or_default(),
        width,
        height,
        fps,
        audio_codec: audio.and_then(|a| a.codec_name.clone()),
    })
}

/// The video stream's size as it is shown: FFmpeg turns the picture by its display matrix, so
/// a quarter turn swaps the sides, and the video is reported, and its renditions labelled, by
/// the size people see. `invalid_media` without a size.
fn displayed_size(video: &Stream) -> Result<(i32, i32), MediaError> {
    let (width, height) = match (video.width, video.height) {
        (Some(w), Some(h)) if w > 0 && h > 0 => (w, h),
        _ => {
            return Err(MediaError::permanent(
                crate::domain::failure::FailureCode::InvalidMedia,
                "the video stream has no frame size",
            ));
        }
    };
    let quarter_turn = rotation_of(&video.side_data_list)
        .is_some_and(|r| (r.round() as i64).rem_euclid(180) == 90);
    Ok(if quarter_turn {
        (height, width)
    } else {
        (width, height)
    })
}

/// `"30000/1001"` -> 29.97; `"0/0"` -> None.
fn parse_rate(rate: &str) -> Option<f64> {
    let (num, den) = rate.split_once('/')?;
    let (num, den): (f64, f64) = (num.parse().ok()?, den.parse().ok()?);
    (num > 0.0 && den > 0.0).then(|| num / den)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_that_could_not_run_is_the_nodes_fault_and_a_refused_file_is_not() {
        use std::os::unix::process::ExitStatusExt;
        let exit = |code: i32| std::process::ExitStatus::from_raw(code << 8);
        let loader = "ffprobe: error while loading shared libraries: libavdevice.so.59: \
                      cannot open shared object file: No such file or directory";
        assert!(could_not_run(exit(127), loader));
        assert!(could_not_run(exit(127), ""));
        assert!(could_not_run(exit(126), "Permission denied"));
        assert!(could_not_run(exit(1), loader), "named, whatever the status");
        assert!(could_not_run(exit(1), "Unknown encoder 'libx264'"));
        assert!(
            could_not_run(std::process::ExitStatus::from_raw(9), ""),
            "killed by a signal vidq did not send (the OOM killer)"
        );
        assert!(!could_not_run(
            exit(1),
            "clip.mp4: Invalid data found when processing input"
        ));
        assert!(!could_not_run(exit(1), "moov atom not found"));
    }

    #[test]
    fn parses_a_typical_mp4() {
        let json = br#"{"streams":[
            {"codec_type":"video","codec_name":"h264","width":1280,"height":720,"avg_frame_rate":"30000/1001","duration":"10.08"},
            {"codec_type":"audio","codec_name":"aac"}],
          "format":{"format_name":"mov,mp4,m4a,3gp,3g2,mj2","duration":"10.080000"}}"#;
        let info = parse(json).unwrap();
        assert_eq!(
            (info.width, info.height, info.duration_ms),
            (1280, 720, 10_080)
        );
        assert!((info.fps - 29.97).abs() < 0.01);
        assert_eq!(info.audio_codec.as_deref(), Some("aac"));
    }

    #[test]
    fn a_quarter_turned_stream_is_reported_by_its_displayed_size() {
        let json = br#"{"streams":[
            {"codec_type":"video","codec_name":"h264","width":480,"height":270,"avg_frame_rate":"30/1",
             "side_data_list":[{"side_data_type":"Display Matrix","rotation":-90}]}],
          "format":{"format_name":"mov,mp4,m4a,3gp,3g2,mj2","duration":"10"}}"#;
        let info = parse(json).unwrap();
        assert_eq!((info.width, info.height), (270, 480));
    }

    #[test]
    fn audio_only_and_cover_art_only_have_no_video_stream() {
        let audio = br#"{"streams":[{"codec_type":"audio","codec_name":"aac"}],"format":{"format_name":"mov,mp4,m4a,3gp,3g2,mj2","duration":"3"}}"#;
        assert_eq!(parse(audio).unwrap_err().code, "no_video_stream");
        let cover = br#"{"streams":[{"codec_type":"audio","codec_name":"mp3"},
            {"codec_type":"video","codec_name":"mjpeg","width":500,"height":500,"disposition":{"attached_pic":1}}],
            "format":{"format_name":"mov,mp4,m4a,3gp,3g2,mj2","duration":"3"}}"#;
        assert_eq!(parse(cover).unwrap_err().code, "no_video_stream");
    }

    #[test]
    fn containers_outside_the_allow_list_are_refused_even_if_probed() {
        let hls = br#"{"streams":[{"codec_type":"video","codec_name":"h264","width":2,"height":2}],"format":{"format_name":"hls","duration":"3"}}"#;
        assert_eq!(parse(hls).unwrap_err().code, "invalid_media");
    }
}
