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
    /// Variable frame rate as phones write it: 30 fps, then 15 fps, timestamps kept (MKV). (A
    /// rate one grid cannot show evenly, such as 30 then 24, is encoded whole: see
    /// `domain::timeline`.)
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

/// `name`: the picture `first`, then `second` (each its own rate, timestamps kept), with
/// `sound`, H.264 and AAC in MKV.
fn two_rates(name: &str, first: &str, second: &str, sound: &str) -> PathBuf {
    make(
        name,
        &[
            "-f",
            "lavfi",
            "-i",
            first,
            "-f",
            "lavfi",
            "-i",
            second,
            "-f",
            "lavfi",
            "-i",
            sound,
            "-filter_complex",
            "[0:v][1:v]concat=n=2:v=1:a=0[v]",
            "-map",
            "[v]",
            "-map",
            "2:a",
            "-fps_mode",
            "vfr",
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-pix_fmt",
            "yuv420p",
            "-c:a",
            "aac",
            "-shortest",
            "-f",
            "matroska",
        ],
    )
}

/// `name`: `upright`'s streams copied, turned 90° by a display matrix (FFmpeg writes none
/// while it encodes, so this is a second pass).
fn turned(name: &str, upright: &Path) -> PathBuf {
    let upright = upright.to_string_lossy().into_owned();
    make(
        name,
        &[
            "-i",
            &upright,
            "-map",
            "0",
            "-c",
            "copy",
            "-metadata:s:v:0",
            "rotate=90",
            "-f",
            "mp4",
        ],
    )
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
        SplitSource::VariableRate => two_rates(
            "split_vfr_30_15.mkv",
            &pattern("30", 10),
            &pattern("15", 10),
            &sine(20),
        ),
        SplitSource::Rotated => {
            let upright = {
                let (v, a) = (pattern("30000/1001", 20), sine(20));
                let mut args = vec!["-f", "lavfi", "-i", &v, "-f", "lavfi", "-i", &a];
                args.extend(x264);
                args.extend(aac);
                args.extend(["-f", "mp4"]);
                make("split_upright.mp4", &args)
            };
            turned("split_rotated.mp4", &upright)
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

/// The sources a black-box probe of split-and-stitch found it failing on (docs/architecture.md,
/// "One frame rate for both paths"), as phones, screen recorders and odd muxers write them.
/// Each carries sync marks: a white frame every 4 s of its own picture and a 50 ms 1 kHz beep
/// every 4 s of its sound, on the same instants unless its kind says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UploadedSource {
    /// 30 s at 25 fps whose timestamps start at 10 s (MP4, `start_time` 10).
    StartsLate,
    /// 32 s at 30 fps with no frames from 5 s to 12 s (a paused recorder), sound throughout.
    Paused,
    /// 30 s at 25 fps whose last 8 s of video packets cannot be decoded.
    UndecodableTail,
    /// 40 s of sound; the video starts 10 s after it and runs to its end.
    VideoLate,
    /// A phone's clip: 60 fps, then 30 fps, then 60 fps (10 s each, timestamps kept), turned
    /// 90° by its display matrix, AAC at 44.1 kHz.
    Phone,
    /// MKV declaring 30 fps whose packets are timed every 20 ms (50 fps), 30 s.
    DeclaresThirtyRunsFifty,
    /// 16 s of video, 40 s of sound.
    AudioLonger,
    /// 641x361 (4:4:4, so the encoder takes the odd sides), 24 s.
    OddSize,
    /// 12 s at 30 fps, then 12 s at 24 fps (timestamps kept, MKV): no one grid shows both
    /// evenly.
    ThirtyThenTwentyFour,
}

/// The marked picture: `seconds` of testsrc2 at `rate`, a white frame where `t + shift` is a
/// multiple of 4 s.
fn marked_picture(size: &str, rate: &str, seconds: u32, shift: u32) -> String {
    format!(
        "testsrc2=size={size}:rate={rate}:duration={seconds},\
         drawbox=c=white:t=fill:enable='lt(mod(t+{shift}.0005,4),0.001)'"
    )
}

/// The marked sound: `seconds` of silence with a 50 ms 1 kHz beep every 4 s.
fn marked_sound(seconds: u32, sample_rate: u32) -> String {
    format!("aevalsrc=exprs='0.5*sin(2*PI*1000*t)*lt(mod(t,4),0.05)':s={sample_rate}:d={seconds}")
}

/// One of the [`UploadedSource`]s.
pub fn uploaded_source(kind: UploadedSource) -> PathBuf {
    let x264 = [
        "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
    ];
    let inputs = |v: &str, a: &str| -> Vec<String> {
        ["-f", "lavfi", "-i", v, "-f", "lavfi", "-i", a]
            .map(str::to_owned)
            .to_vec()
    };
    let run = |name: &str, args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        make(name, &args)
    };
    let with = |mut args: Vec<String>, more: &[&str]| {
        args.extend(more.iter().map(|s| (*s).to_owned()));
        args
    };
    match kind {
        UploadedSource::StartsLate => {
            let args = inputs(
                &marked_picture("320x240", "25", 30, 0),
                &marked_sound(30, 48_000),
            );
            let args = with(
                with(args, &x264),
                &["-c:a", "aac", "-output_ts_offset", "10", "-f", "mp4"],
            );
            run("up_starts_late.mp4", args)
        }
        UploadedSource::Paused => {
            let args = inputs(
                &marked_picture("320x240", "30", 32, 0),
                &marked_sound(32, 48_000),
            );
            let args = with(
                args,
                &["-vf", "select='lt(t,5)+gte(t,12)'", "-fps_mode:v", "vfr"],
            );
            let args = with(with(args, &x264), &["-c:a", "aac", "-f", "mp4"]);
            run("up_paused.mp4", args)
        }
        UploadedSource::UndecodableTail => {
            let head = {
                let args = vec![
                    "-f".to_owned(),
                    "lavfi".to_owned(),
                    "-i".to_owned(),
                    marked_picture("320x240", "25", 22, 0),
                ];
                run("up_tail_a.ts", with(with(args, &x264), &["-f", "mpegts"]))
            };
            // The tail's slices name parameter sets it does not carry: no decoder can read
            // them, though every packet is there with its time.
            let tail = {
                let args = vec![
                    "-f".to_owned(),
                    "lavfi".to_owned(),
                    "-i".to_owned(),
                    "testsrc2=size=320x240:rate=25:duration=8".to_owned(),
                ];
                let args = with(args, &x264);
                run(
                    "up_tail_b.ts",
                    with(
                        args,
                        &[
                            "-x264-params",
                            "sps-id=5",
                            "-bsf:v",
                            "filter_units=remove_types=7|8",
                            "-f",
                            "mpegts",
                        ],
                    ),
                )
            };
            let list = dir().join("up_tail_list.txt");
            if !list.exists() {
                let text = format!("file '{}'\nfile '{}'\n", head.display(), tail.display());
                let partial = dir().join(format!(
                    "up_tail_list.{}.{}",
                    std::process::id(),
                    rand_suffix()
                ));
                std::fs::write(&partial, text).unwrap();
                std::fs::rename(partial, &list).unwrap();
            }
            let list = list.to_string_lossy().into_owned();
            let sound = marked_sound(30, 48_000);
            run(
                "up_undecodable_tail.mp4",
                vec![
                    "-f", "concat", "-safe", "0", "-i", &list, "-f", "lavfi", "-i", &sound, "-map",
                    "0:v", "-map", "1:a", "-c:v", "copy", "-c:a", "aac", "-f", "mp4",
                ]
                .into_iter()
                .map(str::to_owned)
                .collect(),
            )
        }
        UploadedSource::VideoLate => {
            let (v, a) = (
                marked_picture("320x240", "25", 30, 2),
                marked_sound(40, 48_000),
            );
            let args: Vec<String> = [
                "-f",
                "lavfi",
                "-i",
                &a,
                "-itsoffset",
                "10",
                "-f",
                "lavfi",
                "-i",
                &v,
                "-map",
                "1:v",
                "-map",
                "0:a",
                "-fps_mode:v",
                "passthrough",
            ]
            .map(str::to_owned)
            .to_vec();
            run(
                "up_video_late.mp4",
                with(with(args, &x264), &["-c:a", "aac", "-f", "mp4"]),
            )
        }
        UploadedSource::Phone => {
            let upright = {
                let args = inputs(
                    &marked_picture("320x240", "60", 30, 0),
                    &marked_sound(30, 44_100),
                );
                let args = with(
                    args,
                    &[
                        "-vf",
                        "select='lt(t,10)+gte(t,20)+not(mod(n,2))'",
                        "-fps_mode:v",
                        "vfr",
                    ],
                );
                run(
                    "up_phone_upright.mp4",
                    with(
                        with(args, &x264),
                        &["-c:a", "aac", "-ar", "44100", "-f", "mp4"],
                    ),
                )
            };
            turned("up_phone.mp4", &upright)
        }
        UploadedSource::DeclaresThirtyRunsFifty => {
            let args = inputs(
                &marked_picture("320x240", "50", 30, 0),
                &marked_sound(30, 48_000),
            );
            let args = with(
                args,
                &[
                    "-r",
                    "30",
                    "-fps_mode:v",
                    "passthrough",
                    "-enc_time_base:v",
                    "1/1000",
                ],
            );
            run(
                "up_declares_30_runs_50.mkv",
                with(with(args, &x264), &["-c:a", "aac", "-f", "matroska"]),
            )
        }
        UploadedSource::AudioLonger => {
            let args = inputs(
                &marked_picture("320x240", "25", 16, 0),
                &marked_sound(40, 48_000),
            );
            run(
                "up_audio_longer.mp4",
                with(with(args, &x264), &["-c:a", "aac", "-f", "mp4"]),
            )
        }
        UploadedSource::ThirtyThenTwentyFour => two_rates(
            "up_30_then_24.mkv",
            &marked_picture("320x240", "30", 12, 0),
            &marked_picture("320x240", "24", 12, 0),
            &marked_sound(24, 48_000),
        ),
        UploadedSource::OddSize => {
            let args = inputs(
                &marked_picture("640x360", "25", 24, 0),
                &marked_sound(24, 48_000),
            );
            run(
                "up_odd_size.mp4",
                with(
                    args,
                    &[
                        "-vf",
                        "scale=641:361,setsar=1",
                        "-c:v",
                        "libx264",
                        "-preset",
                        "veryfast",
                        "-pix_fmt",
                        "yuv444p",
                        "-c:a",
                        "aac",
                        "-f",
                        "mp4",
                    ],
                ),
            )
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
