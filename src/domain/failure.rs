//! What a failure may say outside the node. A video's `error.message` (the `videos` row, the
//! status API, `video.failed`) is a fixed sentence chosen by the error code; only
//! `invalid_media` adds the tool's reason, with every filesystem path taken out. The full text
//! (tool paths, scratch paths, stderr) is for the node's log.

/// Declares [`FailureCode`]: each code's spelling and the one sentence a client reads for
/// it, written once (the sentence is also the variant's documentation).
macro_rules! failure_codes {
    ($($variant:ident = $spelling:literal => $sentence:literal,)+) => {
        spelled_states! {
            /// Each failure code vidq writes on a video or an attempt. A code the database
            /// holds that is not here is an error where the row is read, never a default.
            pub enum FailureCode {
                $( #[doc = $sentence] $variant = $spelling, )+
            }
        }

        impl FailureCode {
            /// The one sentence a client reads for this code.
            pub fn sentence(self) -> &'static str {
                match self {
                    $(Self::$variant => $sentence,)+
                }
            }
        }
    };
}

failure_codes! {
    InvalidMedia = "invalid_media" => "the file is not a video that can be read",
    NoVideoStream = "no_video_stream" => "the file has no video stream",
    UnsupportedCodec = "unsupported_codec" => "the video codec is not supported",
    TooLong = "too_long" => "the video is longer than the accepted maximum",
    TooLargeDimensions = "too_large_dimensions" => "the video frame is larger than the accepted maximum",
    TooHighFrameRate = "too_high_frame_rate" => "the video frame rate is higher than the accepted maximum",
    OriginalMissing = "original_missing" => "the uploaded original is no longer in storage",
    FfmpegMissing = "ffmpeg_missing" => "the media tools are not available on the processing node",
    ToolFailed = "tool_failed" => "the media tools could not run on the processing node",
    IoError = "io_error" => "the processing node could not use its local disk",
    ProbeTimeout = "probe_timeout" => "reading the video took too long",
    EncodeTimeout = "encode_timeout" => "encoding the video took too long",
    EncodeFailed = "encode_failed" => "the encoder could not process the video",
    StorageError = "storage_error" => "object storage or the database failed while storing the outputs",
    RecordingIncomplete = "recording_incomplete" => "the live recording's files are not all in storage",
    OriginalPending = "original_pending" => "the joined live recording is not in storage yet",
    DeadlineExceeded = "deadline_exceeded" => "the encoding attempt ran out of time",
    AttemptsExhausted = "attempts_exhausted" => "every encoding attempt stopped without finishing",
    Cancelled = "cancelled" => "the encoding was cancelled",
    LeaseExpired = "lease_expired" => "the processing node stopped answering during the attempt",
    InternalError = "internal_error" => "the processing node stopped the attempt on an internal error",
    RecordingPending = "recording_pending" => "the live recording's files were still arriving in storage",
    ClaimLost = "claim_lost" => "the processing node lost its claim on the job",
    StitchFailed = "stitch_failed" => "the video's encoded chunks could not be joined exactly",
}

/// What a path becomes in a reason.
pub const PATH_MARK: &str = "[path]";

/// Longest reason kept after the sentence, in characters.
const MAX_REASON_CHARS: usize = 200;

/// The message a client reads for `code`: its sentence, and for `invalid_media` the tool's
/// `reason` with every path removed.
pub fn public_message(code: FailureCode, reason: Option<&str>) -> String {
    let sentence = code.sentence();
    match reason.map(strip_paths) {
        Some(reason) if code == FailureCode::InvalidMedia && !reason.is_empty() => {
            format!("{sentence}: {reason}")
        }
        _ => sentence.to_owned(),
    }
}

/// `text` on one line with every filesystem path replaced by [`PATH_MARK`], control
/// characters dropped and the length capped. A word (split on whitespace, quotes and brackets
/// around it kept) is a path when it holds a `/` or `\`, except a ratio such as `1/25`; a path
/// with spaces in it becomes several marks, never a readable remainder.
pub fn strip_paths(text: &str) -> String {
    let words: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .map(strip_word)
        .collect();
    let line = words.join(" ");
    match line.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

fn strip_word(word: &str) -> String {
    const OPEN: &[char] = &['\'', '"', '(', '[', '{', '<', '`'];
    const CLOSE: &[char] = &[
        '\'', '"', ')', ']', '}', '>', '`', ',', ';', ':', '.', '!', '?',
    ];
    let core = word.trim_start_matches(OPEN).trim_end_matches(CLOSE);
    if core.is_empty() || !core.contains(['/', '\\']) || is_ratio(core) {
        return word.to_owned();
    }
    let start = word.len() - word.trim_start_matches(OPEN).len();
    let end = start + core.len();
    format!("{}{PATH_MARK}{}", &word[..start], &word[end..])
}

/// `1/25`, `30000/1001`: frame rates and time bases, not paths.
fn is_ratio(word: &str) -> bool {
    let number = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.');
    matches!(word.split_once('/'), Some((a, b)) if number(a) && number(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_in_ffmpeg_reasons_are_removed_and_the_reason_kept() {
        assert_eq!(
            strip_paths("/tmp/vidq-job-Ab12/original: Invalid data found when processing input"),
            "[path]: Invalid data found when processing input"
        );
        assert_eq!(
            strip_paths(
                "Error opening output '/tmp/vidq-job-x/out/hls/seg_00000.m4s': Permission denied"
            ),
            "Error opening output '[path]': Permission denied"
        );
        assert_eq!(
            strip_paths("Could not open file : /var/lib/vidq work/x/thumb.jpg"),
            "Could not open file : [path] [path]"
        );
        assert_eq!(strip_paths("(file:/etc/passwd)."), "([path]).");
        assert_eq!(strip_paths(r"C:\work\original: broken"), "[path]: broken");
    }

    #[test]
    fn text_without_paths_is_kept_on_one_line() {
        assert_eq!(
            strip_paths("[mov,mp4,m4a @ 0x55] moov atom\nnot found"),
            "[mov,mp4,m4a @ 0x55] moov atom not found"
        );
        assert_eq!(
            strip_paths("time base 1/25, rate 30000/1001"),
            "time base 1/25, rate 30000/1001"
        );
        assert_eq!(strip_paths("  \t\u{7}"), "");
    }

    #[test]
    fn long_reasons_are_capped() {
        let long = "x".repeat(1000);
        assert_eq!(strip_paths(&long).chars().count(), MAX_REASON_CHARS + 3);
    }

    #[test]
    fn only_invalid_media_carries_a_reason() {
        assert_eq!(
            public_message(
                FailureCode::InvalidMedia,
                Some("/tmp/a/original: End of file")
            ),
            "the file is not a video that can be read: [path]: End of file"
        );
        assert_eq!(
            public_message(FailureCode::InvalidMedia, None),
            "the file is not a video that can be read"
        );
        assert_eq!(
            public_message(
                FailureCode::FfmpegMissing,
                Some("/opt/ff/ffprobe not found")
            ),
            FailureCode::FfmpegMissing.sentence()
        );
        // A code vidq does not know has no sentence: it is refused where it is read.
        assert!("no_such_code".parse::<FailureCode>().is_err());
    }

    #[test]
    fn every_sentence_is_distinct_and_names_no_path() {
        let all = FailureCode::ALL;
        for (i, code) in all.iter().enumerate() {
            let sentence = code.sentence();
            assert!(!sentence.contains('/'), "{code}");
            assert!(
                all[i + 1..]
                    .iter()
                    .all(|c| c.as_str() != code.as_str() && c.sentence() != sentence),
                "{code} is listed twice or shares its sentence"
            );
        }
    }
}
