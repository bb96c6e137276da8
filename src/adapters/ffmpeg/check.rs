//! Whether this node's media tools work: FFmpeg makes a fraction of a second of its own test
//! pattern and ffprobe reads it back, with the probe's own hardened arguments. A tool that
//! only answers `-version` (a missing library shows up on real work) does not pass.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::MediaConfig;
use super::process;

/// Longest either call of the check may take.
const CHECK_LIMIT: Duration = Duration::from_secs(30);

/// `Ok` when FFmpeg can write a short clip into `scratch` and ffprobe can read it; the
/// failure's text otherwise.
pub async fn tools_work(config: &MediaConfig, scratch: &Path) -> Result<(), String> {
    let clip = scratch.join(format!(".tool-check-{}.mp4", uuid::Uuid::now_v7()));
    let result = make_and_read(config, &clip).await;
    let _ = tokio::fs::remove_file(&clip).await;
    result
}

async fn make_and_read(config: &MediaConfig, clip: &Path) -> Result<(), String> {
    let cancel = CancellationToken::new();
    let mut make: Vec<OsString> = [
        "-v",
        "error",
        "-nostdin",
        "-y",
        "-f",
        "lavfi",
        "-i",
        "testsrc=duration=0.2:size=64x64:rate=10",
        "-c:v",
        "mpeg4",
        "-f",
        "mp4",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    make.push(clip.into());
    process::run(&config.ffmpeg, &make, CHECK_LIMIT, &cancel)
        .await
        .map_err(|e| crate::telemetry::error_chain(&e))?;
    process::run(
        &config.ffprobe,
        &super::probe::args(clip),
        CHECK_LIMIT,
        &cancel,
    )
    .await
    .map(drop)
    .map_err(|e| crate::telemetry::error_chain(&e))
}
