//! The FFmpeg child of one RTMP publish: it reads the stream as FLV on its stdin and writes
//! the recording's fMP4 HLS files (`-c copy`, no re-encoding) with `-method PUT` to the
//! process's own live ingest listener, so they take the same path as an HLS encoder's:
//! spool, ledger, sweeper, live playlist, end and cutoff.
//!
//! A reconnecting encoder starts its clock again at 0. So that the recording stays one
//! timeline, the child numbers its segments from the one after the recording's last
//! (`-start_number`), keeps the timestamps it is given (`-copyts`), and is given them shifted
//! to start where the media received so far ends. Its playlists never carry
//! `#EXT-X-ENDLIST` (`omit_endlist`): a dropped connection is not the end of a broadcast; it
//! ends when the encoder stays away for `VIDQ_LIVE_IDLE_SECS`, or by `POST /v1/live/{id}/end`.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin};

use super::flv;
use crate::adapters::ffmpeg::process::{ProcessError, read_stderr_tail, spawn_fed};

/// How long FFmpeg may take to write its last segment and playlist once its input ends.
const FINISH_LIMIT: Duration = Duration::from_secs(20);

/// Segment length FFmpeg aims at; it cuts at the first keyframe after it, so an encoder
/// with a keyframe every 2 s (what docs/live.md asks) makes 2 s segments.
const SEGMENT_SECS: &str = "2";

/// Where the child starts: the playlist URL it PUTs to, and where the recording stands.
pub struct Start<'a> {
    /// The ffmpeg binary.
    pub ffmpeg: &'a Path,
    /// `http://127.0.0.1:{port}/v1/live/ingest/{stream_key}/index.m3u8`.
    pub playlist_url: &'a str,
    /// The number of its first segment.
    pub first_segment: u32,
    /// The media time already received, in ms: its first message is placed here.
    pub resume_ms: u64,
    /// The stream has audio (and video): what the FLV header declares.
    pub audio: bool,
    /// The stream has video.
    pub video: bool,
}

/// A running child.
pub struct Encoder {
    child: Child,
    stdin: ChildStdin,
    stderr: tokio::task::JoinHandle<String>,
    clock: Clock,
}

impl Encoder {
    /// Starts FFmpeg and sends it the FLV header.
    pub async fn start(start: Start<'_>) -> Result<Self, ProcessError> {
        let args: Vec<OsString> = [
            "-hide_banner",
            "-nostdin",
            "-nostats",
            "-loglevel",
            "error",
            "-f",
            "flv",
            "-i",
            "pipe:0",
            "-map",
            "0",
            "-c",
            "copy",
            "-copyts",
            "-f",
            "hls",
            "-hls_segment_type",
            "fmp4",
            "-hls_time",
            SEGMENT_SECS,
            "-hls_list_size",
            "6",
            "-hls_flags",
            "omit_endlist",
            // Fragments keep the timestamps they are given (`tfdt`), with no edit list: the
            // segments of a reconnect then follow the earlier ones on one timeline, and its
            // init segment is byte for byte the first one.
            "-hls_segment_options",
            "movflags=+frag_discont",
            "-ignore_io_errors",
            "1",
            "-method",
            "PUT",
            "-start_number",
        ]
        .into_iter()
        .map(OsString::from)
        .chain([
            OsString::from(start.first_segment.to_string()),
            OsString::from(start.playlist_url),
        ])
        .collect();
        let mut child = spawn_fed(start.ffmpeg, &args).await?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let stderr = tokio::spawn(async move { read_stderr_tail(&mut stderr).await });
        let program = start.ffmpeg.display().to_string();
        stdin
            .write_all(&flv::header(start.audio, start.video))
            .await
            .map_err(|source| ProcessError::Spawn { program, source })?;
        Ok(Self {
            child,
            stdin,
            stderr,
            clock: Clock::resuming_at(start.resume_ms),
        })
    }

    /// Sends one audio or video message, its timestamp moved onto the recording's timeline.
    /// An error means FFmpeg is gone.
    pub async fn send(&mut self, kind: u8, timestamp_ms: u32, data: &[u8]) -> std::io::Result<()> {
        let at = self.clock.place(timestamp_ms);
        self.stdin.write_all(&flv::tag(kind, at, data)).await
    }

    /// Ends its input and waits for it to write its last files (killing it past
    /// [`FINISH_LIMIT`]); how it exited and the end of what it printed.
    pub async fn finish(mut self) -> (Option<ExitStatus>, String) {
        let _ = self.stdin.shutdown().await;
        drop(self.stdin);
        let status = match tokio::time::timeout(FINISH_LIMIT, self.child.wait()).await {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = self.child.kill().await;
                None
            }
        };
        let stderr = self.stderr.await.unwrap_or_default();
        (status, stderr)
    }
}

/// Moves an encoder's timestamps onto the recording's timeline: the first message lands at
/// the media time already received, the rest keep their distance from it.
#[derive(Debug, Clone, Copy)]
struct Clock {
    resume_ms: u64,
    shift: Option<i64>,
}

impl Clock {
    fn resuming_at(resume_ms: u64) -> Self {
        Self {
            resume_ms,
            shift: None,
        }
    }

    fn place(&mut self, timestamp_ms: u32) -> u32 {
        let shift = *self
            .shift
            .get_or_insert(self.resume_ms as i64 - i64::from(timestamp_ms));
        (i64::from(timestamp_ms) + shift).clamp(0, i64::from(u32::MAX)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_stream_starts_at_zero_and_a_reconnect_where_the_last_one_ended() {
        let mut first = Clock::resuming_at(0);
        assert_eq!(first.place(1_000), 0);
        assert_eq!(first.place(1_040), 40);
        assert_eq!(first.place(990), 0, "earlier than the first: clamped");
        let mut again = Clock::resuming_at(12_480);
        assert_eq!(again.place(0), 12_480);
        assert_eq!(again.place(2_000), 14_480);
    }
}
