//! FFmpeg and ffprobe as child processes: a hardened probe, the HLS + MP4 encode and the
//! thumbnail. Every call is bounded in time, killed on timeout or cancellation, and reports
//! a typed [`MediaError`](crate::domain::media::MediaError).

pub mod check;
pub mod encode;
mod filters;
pub mod probe;
pub mod process;
pub mod repackage;
pub mod split;
pub mod thumbnail;

use std::path::PathBuf;
use std::time::Duration;

use crate::domain::media::MediaLimits;

/// Demuxers the probe and the encoder may use. Anything else (HLS playlists, concat
/// scripts, image sequences, raw streams) is refused before it is parsed, so a file cannot
/// make FFmpeg open other files or URLs.
pub const DEMUXER_ALLOW_LIST: &str = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm";

/// Protocols the probe and the encoder may use: local files only.
pub const PROTOCOL_ALLOW_LIST: &str = "file";

/// How to run the tools and what to make.
#[derive(Clone, Debug)]
pub struct MediaConfig {
    /// `ffmpeg` binary.
    pub ffmpeg: PathBuf,
    /// `ffprobe` binary.
    pub ffprobe: PathBuf,
    /// Wall-clock limit of each child process.
    pub call_timeout: Duration,
    /// Limits the original must meet.
    pub limits: MediaLimits,
    /// Short sides of the HLS renditions (720 = "720p"); the MP4 is made at the largest.
    pub ladder: Vec<i32>,
    /// HLS segment length in seconds.
    pub segment_seconds: u32,
    /// Encoder threads (0 = FFmpeg's choice).
    pub threads: u32,
    /// Which sources are split into chunks, and how long a chunk is.
    pub split: crate::domain::split::SplitSettings,
    /// Highest output frame rate (`VIDQ_MAX_FPS`).
    pub max_fps: u32,
    /// The most a worker's kept copies of originals may take on its disk, in bytes
    /// (`VIDQ_ORIGINALS_CACHE_MB`).
    pub originals_cache_bytes: u64,
}

impl From<&crate::config::MediaArgs> for MediaConfig {
    fn from(args: &crate::config::MediaArgs) -> Self {
        Self {
            ffmpeg: args.ffmpeg.clone(),
            ffprobe: args.ffprobe.clone(),
            call_timeout: std::time::Duration::from_secs(args.ffmpeg_timeout_secs),
            limits: crate::domain::media::MediaLimits {
                max_duration_ms: i64::try_from(args.max_duration_secs * 1000).unwrap_or(i64::MAX),
                max_width: args.max_width,
                max_height: args.max_height,
                max_fps: args.max_source_fps,
            },
            max_fps: args.max_fps,
            originals_cache_bytes: args.originals_cache_mb.saturating_mul(1024 * 1024),
            ladder: args.ladder.clone(),
            segment_seconds: args.segment_secs,
            threads: args.ffmpeg_threads,
            split: crate::domain::split::SplitSettings {
                min_source_secs: args.chunk_min_source_secs,
                chunk_secs: args.chunk_secs,
                segment_secs: args.segment_secs,
            },
        }
    }
}

impl Default for MediaConfig {
    fn default() -> Self {
        Self {
            ffmpeg: "ffmpeg".into(),
            ffprobe: "ffprobe".into(),
            call_timeout: Duration::from_secs(600),
            limits: MediaLimits::default(),
            ladder: vec![720],
            segment_seconds: 4,
            threads: 0,
            split: crate::domain::split::SplitSettings::DEFAULT,
            max_fps: 60,
            originals_cache_bytes: 4096 * 1024 * 1024,
        }
    }
}

impl MediaConfig {
    /// Runs `ffmpeg -version` and `ffprobe -version`, so a node without its tools refuses to
    /// start instead of claiming jobs and failing every video it takes.
    pub async fn check_tools(&self) -> Result<(), process::ProcessError> {
        let cancel = tokio_util::sync::CancellationToken::new();
        for tool in [&self.ffmpeg, &self.ffprobe] {
            process::run(tool, &["-version".into()], Duration::from_secs(10), &cancel).await?;
        }
        Ok(())
    }
}
