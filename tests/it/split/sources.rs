//! The files people upload, split and whole: each source a black-box probe found
//! split-and-stitch failing on is encoded by `vidq worker` processes twice, once split (8 s
//! chunks on a 4 s segment grid, two slots) and once with splitting off, and the split video
//! is held to its single pass (I12): READY where the single pass is READY, the same frame
//! count and length, SSIM at the *source's* own rate within 0.002 of the single pass's mean
//! and at least 0.98 beside every seam, the sound's sync marks within one AAC frame of the
//! source's, and no part left in the bucket.

use std::path::Path;
use std::time::Duration;

use tokio::process::Child;
use vidq::domain::ids::VideoId;

use super::download_outputs;
use super::quality::frame_count;
use crate::support::app::TestApp;
use crate::support::clips::{self, UploadedSource};
use crate::support::pipeline::upload_clip;
use crate::support::queue::video_id;
use crate::support::wait::wait_for_count;
use crate::support::worker::worker_command;

/// One AAC frame at 48 kHz: how far a sync mark may move.
const AAC_FRAME_SECS: f64 = 1024.0 / 48_000.0;

/// A worker process: two slots, a 240-line rendition, split (or not) as the tests split.
fn worker(app: &TestApp, node: &str, dir: &Path, split: bool) -> Child {
    std::fs::create_dir_all(dir).unwrap();
    worker_command(app, node, dir, "1")
        .env("VIDQ_SLOTS", "2")
        .env("VIDQ_CHUNK_MIN_SOURCE_SECS", if split { "10" } else { "0" })
        .env("VIDQ_CHUNK_SECS", "8")
        .env("VIDQ_SEGMENT_SECS", "4")
        .env("VIDQ_LADDER", "240")
        .spawn()
        .unwrap()
}

/// A source encoded one way: its app (kept for its bucket), the video and its API view, and
/// its worker, still running (it deletes what the READY superseded right after the commit),
/// killed when this is dropped.
struct Encoded {
    app: TestApp,
    id: VideoId,
    video: serde_json::Value,
    split: bool,
    _worker: Child,
    _dir: tempfile::TempDir,
}

impl Encoded {
    fn ready(&self) -> bool {
        self.video["status"] == "ready"
    }

    /// The chunks' first frames, from the plan of a video that stayed split.
    async fn seams(&self) -> Vec<i64> {
        let plan = super::quality::stored_plan(&self.app, &self.id).await;
        plan.chunk_starts[1..].to_vec()
    }
}

/// Uploads `source` and lets one worker process encode it, split or whole.
async fn encode(source: &Path, split: bool) -> Encoded {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let dir = tempfile::tempdir().unwrap();
    let node = if split { "enc-split" } else { "enc-whole" };
    let child = worker(&app, node, &dir.path().join(node), split);
    let id = video_id(&upload_clip(&app, &key, source).await);
    wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status IN ('ready', 'failed')"
        ),
        1,
        Duration::from_secs(240),
    )
    .await;
    let video = app.video(&key, &id).await;
    Encoded {
        app,
        id,
        video,
        split,
        _worker: child,
        _dir: dir,
    }
}

/// ffmpeg's stderr for `args` (asserting it ran).
async fn ffmpeg_stderr(args: &[&str], input: &Path) -> String {
    let out = tokio::process::Command::new("ffmpeg")
        .args(["-nostdin", "-hide_banner", "-i"])
        .arg(input)
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "ffmpeg {args:?} on {}",
        input.display()
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The times of the white frames (mean luma over 200) and of the beeps' onsets in `file`, on
/// its own clock as FFmpeg reads it.
async fn sync_marks(file: &Path) -> (Vec<f64>, Vec<f64>) {
    let luma = ffmpeg_stderr(
        &[
            "-map",
            "0:v:0",
            "-vf",
            "signalstats,metadata=print:key=lavfi.signalstats.YAVG",
            "-f",
            "null",
            "-",
        ],
        file,
    )
    .await;
    let mut flashes = Vec::new();
    let mut at = None;
    for line in luma.lines() {
        if let Some(t) = line.split("pts_time:").nth(1) {
            at = t
                .split_whitespace()
                .next()
                .and_then(|t| t.parse::<f64>().ok());
        } else if let Some(y) = line.split("YAVG=").nth(1)
            && y.trim().parse::<f64>().is_ok_and(|y| y > 200.0)
            && let Some(t) = at
        {
            // A held white frame counts once, where it starts.
            if flashes.last().is_none_or(|last: &f64| t - last > 1.0) {
                flashes.push(t);
            }
        }
    }
    let sound = ffmpeg_stderr(
        &[
            "-map",
            "0:a:0",
            "-af",
            "silencedetect=n=-30dB:d=0.5",
            "-f",
            "null",
            "-",
        ],
        file,
    )
    .await;
    let beeps = sound
        .lines()
        .filter_map(|line| line.split("silence_end: ").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .collect();
    (flashes, beeps)
}

/// Each flash's beep offset (beep minus flash) where a beep is within 0.5 s of it.
fn offsets((flashes, beeps): &(Vec<f64>, Vec<f64>)) -> Vec<(f64, f64)> {
    flashes
        .iter()
        .filter_map(|&f| {
            let b = beeps
                .iter()
                .copied()
                .min_by(|a, b| (a - f).abs().total_cmp(&(b - f).abs()))?;
            ((b - f).abs() < 0.5).then_some((f, b - f))
        })
        .collect()
}

/// Per-frame SSIM of `encoded` against `source`, both put on the source's own `rate` from
/// their first sample (the source's video held back to its sound's start, as the outputs
/// are), the source scaled to the encoded size.
async fn ssim_at(rate: &str, encoded: &Path, source: &Path, stats: &Path) -> Vec<f64> {
    let stream = crate::support::media::video_stream(encoded).await;
    let (w, h) = (
        stream["width"].as_u64().unwrap(),
        stream["height"].as_u64().unwrap(),
    );
    let origin = timeline_origin(source).await;
    let graph = format!(
        "[0:v]fps={rate}:start_time=0[a];\
         [1:v]setpts=PTS-{origin:.6}/TB,fps={rate}:start_time=0,scale={w}:{h},format=yuv420p[b];\
         [a][b]ssim=stats_file={stats}:shortest=1",
        stats = stats.display(),
    );
    let status = tokio::process::Command::new("ffmpeg")
        // `fatal`: an undecodable source's decode errors are the point, not news.
        .args(["-nostdin", "-v", "fatal", "-threads", "1", "-i"])
        .arg(encoded)
        .arg("-i")
        .arg(source)
        .args(["-lavfi", &graph, "-f", "null", "-"])
        .status()
        .await
        .unwrap();
    assert!(status.success(), "ssim of {}", encoded.display());
    super::quality::ssim_stats(stats)
}

/// Where a source's output starts on the clock FFmpeg reads it by (its container's start
/// taken off): its first video frame, or its first audio sample where the sound starts over
/// 50 ms earlier (less is an AAC encoder's priming, as vidq reads it too).
async fn timeline_origin(source: &Path) -> f64 {
    let out = tokio::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "stream=codec_type,start_time:format=start_time",
        ])
        .args(["-of", "json"])
        .arg(source)
        .output()
        .await
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let number = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<f64>().ok());
    let container = number(&json["format"]["start_time"]).unwrap_or(0.0);
    let start_of = |kind: &str| {
        json["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["codec_type"] == kind)
            .and_then(|s| number(&s["start_time"]))
    };
    let video = start_of("video").unwrap();
    let origin = match start_of("audio") {
        Some(audio) if audio < video - 0.05 => audio,
        _ => video,
    };
    origin - container
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// No part of `encoded`'s video is left in its bucket.
async fn no_parts_left(encoded: &Encoded) {
    let run = vidq::domain::keys::run_prefix(encoded.id, 1);
    wait_until_empty(encoded, &run).await;
}

async fn wait_until_empty(encoded: &Encoded, run: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<String> = encoded
            .app
            .storage
            .list_prefix(run)
            .await
            .unwrap()
            .into_iter()
            .filter(|k| k[run.len()..].starts_with('p'))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "parts left in the bucket: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Encodes `kind` split and whole and holds the split video to the single pass. `rate` is the
/// source's own frame rate as `num/den` (what the comparison runs at), `stays_split` whether the split
/// path should keep it split to the end (not fall back to the whole encode).
async fn split_matches_its_single_pass(kind: UploadedSource, rate: &str, stays_split: bool) {
    let source = clips::uploaded_source(kind);
    let (split, whole) = tokio::join!(encode(&source, true), encode(&source, false));
    assert!(split.split && !whole.split);
    assert_eq!(
        split.video["status"], whole.video["status"],
        "{kind:?}: split {} / single pass {}",
        split.video, whole.video
    );
    assert!(whole.ready(), "{kind:?}: single pass {}", whole.video);
    let head = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE video_id = '{}' AND parent_id IS NULL AND kind = 'stitch'",
        split.id
    );
    assert_eq!(
        split.app.count(&head).await == 1,
        stays_split,
        "{kind:?}: split to the end"
    );
    for field in ["width", "height", "duration_ms"] {
        assert_eq!(
            split.video[field], whole.video[field],
            "{kind:?}: {field}: split {} / single pass {}",
            split.video, whole.video
        );
    }

    let split_out = download_outputs(&split.app, split.id, 0).await;
    let whole_out = download_outputs(&whole.app, whole.id, 0).await;
    let frames = frame_count(&whole_out.mp4).await;
    assert_eq!(
        frame_count(&split_out.mp4).await,
        frames,
        "{kind:?}: frames"
    );

    let work = tempfile::tempdir().unwrap();
    let s = ssim_at(rate, &split_out.mp4, &source, &work.path().join("s.log")).await;
    let r = ssim_at(rate, &whole_out.mp4, &source, &work.path().join("r.log")).await;
    let (split_mean, whole_mean) = (mean(&s), mean(&r));
    eprintln!(
        "{kind:?}: {frames} frames; SSIM at {rate} fps split {split_mean:.5}, single {whole_mean:.5}"
    );
    assert!(
        split_mean >= whole_mean - 0.002,
        "{kind:?}: split SSIM {split_mean:.5} vs single pass {whole_mean:.5}"
    );
    if stays_split {
        let per_second = vidq::domain::split::Rate::parse(rate).unwrap().per_second();
        let plan = super::quality::stored_plan(&split.app, &split.id).await;
        for seam in split.seams().await {
            // The seam's frame on the comparison's grid. A seam past the source's picture
            // (where its last frame is held for sound that runs on) has nothing to compare.
            let at = (plan.rate.time_of(seam) * per_second).round() as i64;
            if at as usize >= s.len() {
                continue;
            }
            let near = (at - 5).max(0) as usize..((at + 6) as usize).min(s.len());
            let worst = s[near].iter().copied().fold(1.0, f64::min);
            eprintln!("{kind:?}: worst SSIM within 5 frames of the seam at {seam}: {worst:.4}");
            assert!(
                worst >= 0.98,
                "{kind:?}: SSIM {worst:.4} beside the seam at frame {seam}"
            );
        }
    }

    let (source_marks, split_marks) = (
        offsets(&sync_marks(&source).await),
        offsets(&sync_marks(&split_out.mp4).await),
    );
    assert!(!source_marks.is_empty(), "{kind:?}: the source has marks");
    assert_eq!(
        split_marks.len(),
        source_marks.len(),
        "{kind:?}: sync marks split {split_marks:?} / source {source_marks:?}"
    );
    let worst_shift = split_marks
        .iter()
        .zip(&source_marks)
        .map(|((_, got), (_, want))| (got - want).abs())
        .fold(0.0, f64::max);
    eprintln!(
        "{kind:?}: {} sync marks, largest A/V shift from the source's {:.1} ms; {}x{}, {} ms",
        source_marks.len(),
        worst_shift * 1000.0,
        split.video["width"],
        split.video["height"],
        split.video["duration_ms"]
    );
    for ((_, got), (at, want)) in split_marks.iter().zip(&source_marks) {
        assert!(
            (got - want).abs() <= AAC_FRAME_SECS,
            "{kind:?}: at {at:.2} s the sound is {got:.4} s off its picture, the source's {want:.4}"
        );
    }
    no_parts_left(&split).await;
}

#[tokio::test]
async fn a_source_whose_clock_starts_at_10_s_splits_like_its_single_pass() {
    split_matches_its_single_pass(UploadedSource::StartsLate, "25/1", true).await;
}

#[tokio::test]
async fn a_paused_recording_splits_like_its_single_pass() {
    split_matches_its_single_pass(UploadedSource::Paused, "30/1", true).await;
}

#[tokio::test]
async fn a_source_whose_tail_cannot_be_decoded_ends_like_its_single_pass() {
    split_matches_its_single_pass(UploadedSource::UndecodableTail, "25/1", true).await;
}

#[tokio::test]
async fn video_that_starts_after_its_sound_keeps_all_the_sound() {
    split_matches_its_single_pass(UploadedSource::VideoLate, "25/1", true).await;
}

#[tokio::test]
async fn a_phone_clip_at_60_and_30_fps_keeps_60_fps() {
    split_matches_its_single_pass(UploadedSource::Phone, "60/1", true).await;
}

#[tokio::test]
async fn packets_timed_at_50_fps_in_a_file_declaring_30_keep_50() {
    split_matches_its_single_pass(UploadedSource::DeclaresThirtyRunsFifty, "50/1", true).await;
}

#[tokio::test]
async fn sound_that_outlasts_the_picture_keeps_playing() {
    split_matches_its_single_pass(UploadedSource::AudioLonger, "25/1", true).await;
}

#[tokio::test]
async fn odd_sides_are_rounded_to_even() {
    split_matches_its_single_pass(UploadedSource::OddSize, "25/1", true).await;
}

/// What the checks above lean on, checked once: the outputs' own facts for the sources
/// whose facts the probe found wrong.
#[tokio::test]
async fn the_reported_facts_are_the_outputs() {
    let phone = encode(&clips::uploaded_source(UploadedSource::Phone), true).await;
    assert!(phone.ready(), "{}", phone.video);
    // Displayed portrait: 240 wide, 320 high, at 60 fps (30 s, 1800 frames).
    assert_eq!(
        (&phone.video["width"], &phone.video["height"]),
        (&serde_json::json!(240), &serde_json::json!(320)),
        "{}",
        phone.video
    );
    let out = download_outputs(&phone.app, phone.id, 0).await;
    assert_eq!(frame_count(&out.mp4).await, 1800);
    let stream = crate::support::media::video_stream(&out.mp4).await;
    assert_eq!(stream["r_frame_rate"], "60/1", "{stream}");
    // A player on its playback URL plays all 30 s of the picture.
    let url = phone.video["playback"]["hls_url"].as_str().unwrap();
    let played = crate::support::playback::played_seconds_by_stream(url).await;
    assert!(
        played.len() == 1 && (played[0] - 30.0).abs() <= 0.1,
        "played {played:?} of the phone's 30 s"
    );

    let longer = encode(&clips::uploaded_source(UploadedSource::AudioLonger), true).await;
    assert!(longer.ready(), "{}", longer.video);
    let ms = longer.video["duration_ms"].as_i64().unwrap();
    assert!(
        (ms - 40_000).abs() <= 50,
        "the sound's 40 s: {}",
        longer.video
    );
    // A player on its playback URL plays the sound to its end, past the picture's 16 s.
    let url = longer.video["playback"]["hls_url"].as_str().unwrap();
    let played = crate::support::playback::played_seconds(url).await;
    assert!((played - 40.0).abs() <= 0.1, "played {played} s of 40 s");
}

#[tokio::test]
async fn a_source_no_one_grid_shows_evenly_is_encoded_whole_with_every_frame() {
    let source = clips::uploaded_source(UploadedSource::ThirtyThenTwentyFour);
    let (split, whole) = tokio::join!(encode(&source, true), encode(&source, false));
    assert!(
        split.ready() && whole.ready(),
        "{} / {}",
        split.video,
        whole.video
    );
    // 24 fps on a 30 fps grid would hold one frame in four twice: not split, and the whole
    // encode keeps the source's own timing, every frame once.
    let planned = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE video_id = '{}'",
        split.id
    );
    assert_eq!(split.app.count(&planned).await, 1, "encoded as one job");
    let split_out = download_outputs(&split.app, split.id, 0).await;
    let whole_out = download_outputs(&whole.app, whole.id, 0).await;
    let frames = frame_count(&source).await;
    assert_eq!(frames, 12 * 30 + 12 * 24);
    assert_eq!(frame_count(&split_out.mp4).await, frames);
    assert_eq!(frame_count(&whole_out.mp4).await, frames);
    let (source_marks, out_marks) = (
        offsets(&sync_marks(&source).await),
        offsets(&sync_marks(&split_out.mp4).await),
    );
    assert_eq!(out_marks.len(), source_marks.len(), "{out_marks:?}");
    for ((_, got), (at, want)) in out_marks.iter().zip(&source_marks) {
        assert!(
            (got - want).abs() <= AAC_FRAME_SECS,
            "at {at:.2} s the sound is {got:.4} s off its picture, the source's {want:.4}"
        );
    }
}
