//! Small clips the tests make with FFmpeg's own test sources, cached under the target
//! directory so each is generated once per machine. No binary test data lives in the repo.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where generated clips are kept.
fn dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("clips");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs ffmpeg with `args` to make `name` unless it exists. Writes to a temporary name first
/// so a test running in parallel never sees a half-written clip.
fn make(name: &str, args: &[&str]) -> PathBuf {
    let path = dir().join(name);
    if path.exists() {
        return path;
    }
    let partial = dir().join(format!(
        "{}.{}.partial.{}",
        name,
        std::process::id(),
        rand_suffix()
    ));
    let status = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y"])
        .args(args)
        .arg(&partial)
        .status()
        .expect("ffmpeg is installed (apt-get install ffmpeg)");
    assert!(status.success(), "ffmpeg could not make {name}");
    std::fs::rename(&partial, &path).unwrap();
    path
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// A video with audio: `seconds` long, `w`x`h`, 25 fps, H.264 + AAC in MP4 (moov at the end,
/// as a camera writes it).
pub fn video(seconds: u32, w: u32, h: u32) -> PathBuf {
    let name = format!("testsrc_{seconds}s_{w}x{h}.mp4");
    h264_aac(&name, seconds, w, h, &[], "mp4")
}

/// What a broadcaster sends: `seconds` of 320x240 at 25 fps, H.264 with a keyframe every
/// 2 s (as the README asks encoders for) and AAC, in an FLV file to send with `-c copy`.
pub fn broadcast(seconds: u32) -> PathBuf {
    let name = format!("broadcast_{seconds}s.flv");
    let keyframes = ["-g", "50", "-keyint_min", "50", "-sc_threshold", "0"];
    h264_aac(&name, seconds, 320, 240, &keyframes, "flv")
}

/// `name`: FFmpeg's test pattern and a sine, H.264 (with `video` options) + AAC in `format`.
fn h264_aac(name: &str, seconds: u32, w: u32, h: u32, video: &[&str], format: &str) -> PathBuf {
    let src = format!("testsrc2=size={w}x{h}:rate=25:duration={seconds}");
    let sine = format!("sine=frequency=440:duration={seconds}");
    let mut args = vec![
        "-f",
        "lavfi",
        "-i",
        &src,
        "-f",
        "lavfi",
        "-i",
        &sine,
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-pix_fmt",
        "yuv420p",
    ];
    args.extend_from_slice(video);
    args.extend_from_slice(&["-c:a", "aac", "-shortest", "-f", format]);
    make(name, &args)
}

/// The default small clip: 6 s of 320x240.
pub fn small() -> PathBuf {
    video(6, 320, 240)
}

/// Audio only, in an MP4 container.
pub fn audio_only() -> PathBuf {
    make(
        "sine_2s.mp4",
        &[
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:duration=2",
            "-c:a",
            "aac",
            "-f",
            "mp4",
        ],
    )
}

/// The small clip cut in half: its `moov` (at the end) is gone.
pub fn truncated() -> PathBuf {
    let path = dir().join("truncated.mp4");
    if !path.exists() {
        let bytes = std::fs::read(small()).unwrap();
        let partial = dir().join(format!(
            "truncated.{}.{}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::write(&partial, &bytes[..bytes.len() / 2]).unwrap();
        std::fs::rename(partial, &path).unwrap();
    }
    path
}

/// The sources split-and-stitch must join exactly (`tests/it/split`): each about 20 s of
/// 320x240 with a 440 Hz sine unless its kind says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitSource {
    /// H.264 with up to 8 B-frames in a row, 25 fps.
    BFrameHeavy,
    /// Variable frame rate as phones write it: 30 fps, then 24 fps, timestamps kept (MKV).
    VariableRate,
    /// Shot rotated: 90° in the display matrix, at 30000/1001 fps.
    Rotated,
    /// HEVC with open GOPs (leading frames before each CRA), in MKV, starting at 1.5 s.
    OpenGopHevc,
    /// The audio starts 2 s after the video.
    LateAudio,
    /// No audio track.
    NoAudio,
    /// 17 s: with 8 s chunks and 4 s segments the last chunk is 1 s, shorter than a segment.
    ShortLastChunk,
}

/// One of the [`SplitSource`]s.
pub fn split_source(kind: SplitSource) -> PathBuf {
    let pattern =
        |rate: &str, seconds: u32| format!("testsrc2=size=320x240:rate={rate}:duration={seconds}");
    let sine = |seconds: u32| format!("sine=frequency=440:duration={seconds}");
    let x264 = [
        "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
    ];
    let aac = ["-c:a", "aac", "-shortest"];
    match kind {
        SplitSource::BFrameHeavy => {
            let (v, a) = (pattern("25", 20), sine(20));
            let mut args = vec!["-f", "lavfi", "-i", &v, "-f", "lavfi", "-i", &a];
            args.extend(x264);
            args.extend(["-bf", "8", "-b_strategy", "2"]);
            args.extend(aac);
            args.extend(["-f", "mp4"]);
            make("split_bframes.mp4", &args)
        }
        SplitSource::VariableRate => {
            let (first, second, a) = (pattern("30", 10), pattern("24", 10), sine(20));
            let mut args = vec![
                "-f",
                "lavfi",
                "-i",
                &first,
                "-f",
                "lavfi",
                "-i",
                &second,
                "-f",
                "lavfi",
                "-i",
                &a,
                "-filter_complex",
                "[0:v][1:v]concat=n=2:v=1:a=0[v]",
                "-map",
                "[v]",
                "-map",
                "2:a",
                "-fps_mode",
                "vfr",
            ];
            args.extend(x264);
            args.extend(aac);
            args.extend(["-f", "matroska"]);
            make("split_vfr.mkv", &args)
        }
        SplitSource::Rotated => {
            let upright = {
                let (v, a) = (pattern("30000/1001", 20), sine(20));
                let mut args = vec!["-f", "lavfi", "-i", &v, "-f", "lavfi", "-i", &a];
                args.extend(x264);
                args.extend(aac);
                args.extend(["-f", "mp4"]);
                make("split_upright.mp4", &args)
            };
            let upright = upright.to_string_lossy().into_owned();
            make(
                "split_rotated.mp4",
                &[
                    "-i",
                    &upright,
                    "-c",
                    "copy",
                    "-metadata:s:v:0",
                    "rotate=90",
                    "-f",
                    "mp4",
                ],
            )
        }
        SplitSource::OpenGopHevc => {
            let (v, a) = (pattern("25", 20), sine(20));
            make(
                "split_hevc.mkv",
                &[
                    "-f",
                    "lavfi",
                    "-i",
                    &v,
                    "-f",
                    "lavfi",
                    "-i",
                    &a,
                    "-c:v",
                    "libx265",
                    "-preset",
                    "ultrafast",
                    "-x265-params",
                    "open-gop=1:keyint=50:log-level=error",
                    "-pix_fmt",
                    "yuv420p",
                    "-c:a",
                    "aac",
                    "-shortest",
                    "-output_ts_offset",
                    "1.5",
                    "-f",
                    "matroska",
                ],
            )
        }
        SplitSource::LateAudio => {
            let (v, a) = (pattern("25", 20), sine(18));
            let mut args = vec![
                "-f",
                "lavfi",
                "-i",
                &v,
                "-itsoffset",
                "2",
                "-f",
                "lavfi",
                "-i",
                &a,
            ];
            args.extend(x264);
            args.extend(["-c:a", "aac", "-f", "mp4"]);
            make("split_late_audio.mp4", &args)
        }
        SplitSource::NoAudio => {
            let v = pattern("25", 20);
            let mut args = vec!["-f", "lavfi", "-i", &v];
            args.extend(x264);
            args.extend(["-f", "mp4"]);
            make("split_no_audio.mp4", &args)
        }
        SplitSource::ShortLastChunk => {
            let (v, a) = (pattern("25", 17), sine(17));
            let mut args = vec!["-f", "lavfi", "-i", &v, "-f", "lavfi", "-i", &a];
            args.extend(x264);
            args.extend(aac);
            args.extend(["-f", "mov"]);
            make("split_short_last.mov", &args)
        }
    }
}

/// An hour of a small, low-rate picture (160x90 at 1 fps) with a quiet mono track: long enough
/// to need splitting everywhere, cheap enough to encode in a test.
pub fn one_hour() -> PathBuf {
    make(
        "one_hour_160x90.mp4",
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=160x90:rate=1:duration=3600",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:sample_rate=8000:duration=3600",
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-pix_fmt",
            "yuv420p",
            "-c:a",
            "aac",
            "-ac",
            "1",
            "-b:a",
            "16k",
            "-shortest",
            "-f",
            "mp4",
        ],
    )
}
