//! What a probe says about a video, the limits it must meet, and the typed failure every
//! media step reports: `Permanent` (the input can never encode; fail at once) or `Retryable`
//! (the node or S3 had a bad moment; another attempt may succeed).

use super::failure::FailureCode;

use serde::Serialize;

/// Facts read from the original by the probe.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MediaInfo {
    /// Demuxer that opened it (`mov,mp4,m4a,3gp,3g2,mj2`, `matroska,webm`).
    pub container: String,
    /// Duration in milliseconds.
    pub duration_ms: i64,
    /// Codec of the first video stream.
    pub video_codec: String,
    /// Displayed width (a quarter-turn rotation is applied: a portrait phone clip is
    /// portrait).
    pub width: i32,
    /// Displayed height.
    pub height: i32,
    /// Average frame rate.
    pub fps: f64,
    /// Codec of the first audio stream, if any.
    pub audio_codec: Option<String>,
}

impl MediaInfo {
    /// The facts of the output made on `timeline`: its frame rate and its length (video or
    /// sound, whichever runs longer).
    pub fn timed_by(self, timeline: &super::timeline::Timeline) -> Self {
        Self {
            fps: timeline.rate.per_second(),
            duration_ms: (timeline.duration_secs() * 1000.0).round() as i64,
            ..self
        }
    }

    /// Whether there is an audio stream to encode.
    pub fn has_audio(&self) -> bool {
        self.audio_codec.is_some()
    }
}

/// Limits an original must meet before any encoding CPU is spent on it.
#[derive(Clone, Debug, PartialEq)]
pub struct MediaLimits {
    /// Longest accepted duration, in milliseconds.
    pub max_duration_ms: i64,
    /// Widest accepted frame (long side for portrait videos too).
    pub max_width: i32,
    /// Tallest accepted frame (short side for portrait videos too).
    pub max_height: i32,
    /// Highest accepted frame rate.
    pub max_fps: f64,
}

impl Default for MediaLimits {
    fn default() -> Self {
        Self {
            max_duration_ms: 4 * 60 * 60 * 1000,
            max_width: 3840,
            max_height: 2160,
            max_fps: 120.0,
        }
    }
}

/// Video codecs the pipeline decodes; anything else fails as `unsupported_codec`.
pub const ACCEPTED_VIDEO_CODECS: &[&str] = &[
    "h264",
    "hevc",
    "vp8",
    "vp9",
    "av1",
    "mpeg4",
    "mpeg2video",
    "prores",
    "h263",
    "mjpeg",
];

impl MediaLimits {
    /// Checks probed facts against the limits. Orientation does not matter: a 2160x3840
    /// portrait video fits a 3840x2160 limit.
    pub fn check(&self, info: &MediaInfo) -> Result<(), MediaError> {
        if !ACCEPTED_VIDEO_CODECS.contains(&info.video_codec.as_str()) {
            return Err(MediaError::permanent(
                crate::domain::failure::FailureCode::UnsupportedCodec,
                format!("video codec {:?} is not supported", info.video_codec),
            ));
        }
        if info.duration_ms > self.max_duration_ms {
            return Err(MediaError::permanent(
                crate::domain::failure::FailureCode::TooLong,
                format!(
                    "the video lasts {:.1} s; the limit is {:.1} s",
                    info.duration_ms as f64 / 1000.0,
                    self.max_duration_ms as f64 / 1000.0
                ),
            ));
        }
        let (long, short) = (info.width.max(info.height), info.width.min(info.height));
        let (max_long, max_short) = (
            self.max_width.max(self.max_height),
            self.max_width.min(self.max_height),
        );
        if long > max_long || short > max_short {
            return Err(MediaError::permanent(
                crate::domain::failure::FailureCode::TooLargeDimensions,
                format!(
                    "the video is {}x{}; the limit is {}x{}",
                    info.width, info.height, self.max_width, self.max_height
                ),
            ));
        }
        if info.fps > self.max_fps {
            return Err(MediaError::permanent(
                crate::domain::failure::FailureCode::TooHighFrameRate,
                format!(
                    "the video runs at {:.1} fps; the limit is {:.1}",
                    info.fps, self.max_fps
                ),
            ));
        }
        Ok(())
    }

    /// Largest frame area the decoder may allocate (ffmpeg's `-max_pixels`).
    pub fn max_pixels(&self) -> i64 {
        i64::from(self.max_width) * i64::from(self.max_height)
    }
}

/// Whether another attempt could succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureClass {
    /// The input itself is the problem: fail the video now, burn no retries.
    Permanent,
    /// The node, a tool or S3 failed: retry while attempts remain.
    Retryable,
}

/// The code of a failure whose media tool could not run on the node (not the file's fault):
/// retried, and counted against the node (see the worker's `VIDQ_WORKER_TOOL_FAILURES`).
pub const TOOL_FAILED: FailureCode = FailureCode::ToolFailed;

/// A media step's failure, with a stable code that becomes the video's `error.code`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct MediaError {
    /// Permanent or retryable.
    pub class: FailureClass,
    /// Stable code (`invalid_media`, `too_long`, `encode_timeout`, ...).
    pub code: FailureCode,
    /// Detail for the node's log: it may name tool and scratch paths. It is never stored or
    /// sent; what leaves the node is [`MediaError::public_message`].
    pub message: String,
    /// For `invalid_media`: the tool's own reason, shown (paths removed) after the sentence.
    pub reason: Option<String>,
}

impl MediaError {
    /// The input can never be encoded.
    pub fn permanent(code: FailureCode, message: impl Into<String>) -> Self {
        Self {
            class: FailureClass::Permanent,
            code,
            message: message.into(),
            reason: None,
        }
    }

    /// Another attempt may succeed.
    pub fn retryable(code: FailureCode, message: impl Into<String>) -> Self {
        Self {
            class: FailureClass::Retryable,
            code,
            message: message.into(),
            reason: None,
        }
    }

    /// Adds the tool's reason a client may read (only `invalid_media` shows it).
    #[must_use]
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// What the video's record, the status API and `video.failed` say: the code's fixed
    /// sentence (plus, for `invalid_media`, the reason with every path removed).
    pub fn public_message(&self) -> String {
        super::failure::public_message(self.code, self.reason.as_deref())
    }

    /// Whether this failure ends the video without retries.
    pub fn is_permanent(&self) -> bool {
        self.class == FailureClass::Permanent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(width: i32, height: i32, duration_ms: i64, fps: f64, codec: &str) -> MediaInfo {
        MediaInfo {
            container: "mov,mp4,m4a,3gp,3g2,mj2".into(),
            duration_ms,
            video_codec: codec.into(),
            width,
            height,
            fps,
            audio_codec: None,
        }
    }

    #[test]
    fn limits_refuse_with_stable_permanent_codes() {
        let limits = MediaLimits::default();
        assert!(
            limits
                .check(&info(1920, 1080, 60_000, 30.0, "h264"))
                .is_ok()
        );
        assert!(
            limits
                .check(&info(2160, 3840, 60_000, 30.0, "h264"))
                .is_ok(),
            "portrait 4K fits"
        );
        let code = |i: MediaInfo| limits.check(&i).unwrap_err();
        assert_eq!(
            code(info(7680, 4320, 1000, 30.0, "h264")).code,
            "too_large_dimensions"
        );
        assert_eq!(
            code(info(640, 480, 4 * 3600 * 1000 + 1, 30.0, "h264")).code,
            "too_long"
        );
        assert_eq!(
            code(info(640, 480, 1000, 240.0, "h264")).code,
            "too_high_frame_rate"
        );
        let odd = code(info(640, 480, 1000, 30.0, "cinepak"));
        assert_eq!(odd.code, "unsupported_codec");
        assert!(odd.is_permanent());
    }
}
