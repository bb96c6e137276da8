//! The thumbnail: one frame from the middle of the encoded MP4's picture, at most 640 wide.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::encode::{classify_encode, hardened_input, missing};
use super::{MediaConfig, process};
use crate::domain::keys::outputs;
use crate::domain::media::{MediaError, MediaInfo};
use crate::domain::timeline::Timeline;

/// Widest thumbnail.
const THUMBNAIL_MAX_WIDTH: i32 = 640;

/// Where in the encoded MP4 the thumbnail is taken: the middle of the source's picture (not
/// of its sound, which may run longer, nor of the last frame held for it), as `timeline`
/// measured it.
pub fn thumbnail_secs(info: &MediaInfo, timeline: Option<&Timeline>) -> f64 {
    timeline.map_or(info.duration_ms as f64 / 1000.0, Timeline::picture_secs) / 2.0
}

/// The thumbnail's command line: the frame `at_secs` into `mp4` (the encoded MP4, whose video
/// starts at 0), at most 640 wide.
pub fn thumbnail_args(config: &MediaConfig, at_secs: f64, mp4: &Path, out: &Path) -> Vec<OsString> {
    let mut args = hardened_input(config, mp4, Some(at_secs));
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

/// Makes `out/thumb.jpg` from the frame `at_secs` into `mp4` (see [`thumbnail_secs`]); its
/// path once it exists.
pub(super) async fn thumbnail(
    config: &MediaConfig,
    at_secs: f64,
    mp4: &Path,
    out: &Path,
    cancel: &CancellationToken,
) -> Result<PathBuf, MediaError> {
    process::run(
        &config.ffmpeg,
        &thumbnail_args(config, at_secs, mp4, out),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify_encode(err, mp4))?;
    let path = out.join(outputs::THUMBNAIL);
    if !tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Err(missing(outputs::THUMBNAIL));
    }
    Ok(path)
}
