//! Media quality of a stitched video, measured against a single-pass encode of the same
//! source with the same settings (the chunk command over the whole frame range, as if the
//! video were one chunk): the same frames, the same length, SSIM per rendition against the
//! source within 0.002 of the single pass's mean and no dip around a seam, and audio with no
//! jump at a seam larger than anywhere else. Run on every kind of source the planner accepts.

use std::path::{Path, PathBuf};

use vidq::adapters::ffmpeg::split::chunk_args;
use vidq::domain::split::{ChunkRange, SplitPlan};

use super::{download_outputs, ready_split, split_media};
use crate::support::clips::{self, SplitSource};

/// Video packets in `path`'s first video stream (a frame each).
pub async fn frame_count(path: &Path) -> i64 {
    let out = tokio::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_packets", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_read_packets", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ffprobe {}", path.display());
    // A TS lists its stream twice (in its program and alone): the first line is the count.
    text.lines()
        .next()
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("ffprobe counted {text:?} in {}", path.display()))
}

/// The first video stream's size and duration (seconds).
async fn size_and_duration(path: &Path) -> ((u32, u32), f64) {
    let stream = crate::support::media::video_stream(path).await;
    let number = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<f64>().ok());
    (
        (
            stream["width"].as_u64().unwrap() as u32,
            stream["height"].as_u64().unwrap() as u32,
        ),
        number(&stream["duration"]).unwrap_or(0.0),
    )
}

/// The plan vidq stored on the video's job.
pub(super) async fn stored_plan(
    app: &crate::support::app::TestApp,
    id: &dyn std::fmt::Display,
) -> SplitPlan {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Jsonb)]
        plan: serde_json::Value,
    }
    use diesel_async::RunQueryDsl;
    let mut conn = app.pool.get().await.unwrap();
    let row: Row = diesel::sql_query(format!(
        "SELECT plan FROM video_encoding_jobs WHERE video_id = '{id}' AND parent_id IS NULL"
    ))
    .get_result(&mut conn)
    .await
    .unwrap();
    serde_json::from_value(row.plan).unwrap()
}

/// The single-pass reference: the chunk command over every frame, one TS per rendition.
async fn single_pass(plan: &SplitPlan, source: &Path, dir: &Path) -> Vec<PathBuf> {
    let outputs: Vec<PathBuf> = (0..plan.short_sides.len())
        .map(|n| dir.join(format!("single_v{n}.ts")))
        .collect();
    let whole = ChunkRange {
        part: 0,
        first: 0,
        end: plan.frames,
    };
    let status = tokio::process::Command::new("ffmpeg")
        .args(chunk_args(&split_media(), plan, whole, source, &outputs))
        .status()
        .await
        .unwrap();
    assert!(status.success());
    outputs
}

/// Per-frame SSIM of `encoded` against `source` put on the plan's grid and scaled to the
/// encoded size. Frames are paired by time, each side's first frame at 0 (an HLS rendition
/// starts a B-frame delay late): numbering them in the order the decoder hands them out pairs
/// some frames wrongly.
async fn ssim(plan: &SplitPlan, encoded: &Path, source: &Path, stats: &Path) -> Vec<f64> {
    let ((w, h), _) = size_and_duration(encoded).await;
    let rate = plan.rate.ffmpeg();
    let graph = format!(
        "[0:v]format=yuv420p,setpts=PTS-STARTPTS[a];\
         [1:v]setpts=PTS-{origin:.6}/TB,fps={rate},tpad=stop_mode=clone:stop_duration=2,\
         trim=end_frame={frames},scale={w}:{h},format=yuv420p,setpts=PTS-STARTPTS[b];\
         [a][b]ssim=stats_file={stats}",
        origin = plan.origin_secs,
        frames = plan.frames,
        stats = stats.display(),
    );
    let status = tokio::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-threads", "1", "-i"])
        .arg(encoded)
        .args(["-copyts", "-i"])
        .arg(source)
        .args(["-lavfi", &graph, "-f", "null", "-"])
        .status()
        .await
        .unwrap();
    assert!(status.success(), "ssim of {}", encoded.display());
    ssim_stats(stats)
}

/// The per-frame `All:` values of an `ssim` filter's stats file.
pub(super) fn ssim_stats(stats: &Path) -> Vec<f64> {
    std::fs::read_to_string(stats)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let all = line.split("All:").nth(1)?;
            all.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

/// The stitched audio of `mp4`, mono 48 kHz samples.
async fn audio_samples(mp4: &Path) -> Vec<f32> {
    let out = tokio::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(mp4)
        .args([
            "-map", "0:a:0", "-ac", "1", "-ar", "48000", "-f", "f32le", "-",
        ])
        .output()
        .await
        .unwrap();
    assert!(out.status.success());
    out.stdout
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Splits `kind` through the queue and holds the stitched outputs to the single pass.
async fn stitched_matches_a_single_pass(kind: SplitSource) {
    let source = clips::split_source(kind);
    let (app, key, id) = ready_split(&source, 2).await;
    let video = app.video(&key, &id).await;
    assert_eq!(video["status"], "ready", "{kind:?}: {video}");
    let plan = stored_plan(&app, &id).await;
    assert!(plan.chunks() >= 3, "{kind:?} is split: {plan:?}");
    let out = download_outputs(&app, id, plan.short_sides.len()).await;
    let work = tempfile::tempdir().unwrap();
    let single = single_pass(&plan, &source, work.path()).await;

    // The same frames and the same length as the single pass.
    assert_eq!(frame_count(&out.mp4).await, plan.frames, "{kind:?}: MP4");
    let frame = plan.rate.time_of(1);
    let (_, stitched_secs) = size_and_duration(&out.mp4).await;
    assert!(
        (stitched_secs - plan.rate.time_of(plan.frames)).abs() <= frame + 1e-6,
        "{kind:?}: the MP4 lasts {stitched_secs} s for {} frames",
        plan.frames
    );
    let seams: Vec<i64> = plan.chunk_starts[1..].to_vec();
    for (n, (stitched, single)) in out.renditions.iter().zip(&single).enumerate() {
        assert_eq!(frame_count(stitched).await, plan.frames, "{kind:?} v{n}");
        assert_eq!(
            frame_count(single).await,
            plan.frames,
            "{kind:?} single v{n}"
        );
        let s = ssim(
            &plan,
            stitched,
            &source,
            &work.path().join(format!("s{n}.log")),
        )
        .await;
        let r = ssim(
            &plan,
            single,
            &source,
            &work.path().join(format!("r{n}.log")),
        )
        .await;
        assert_eq!(
            s.len() as i64,
            plan.frames,
            "{kind:?} v{n}: SSIM of every frame"
        );
        let (stitched_mean, single_mean) = (mean(&s), mean(&r));
        eprintln!(
            "{kind:?} v{n}: SSIM stitched {stitched_mean:.5}, single {single_mean:.5}, frames {}",
            plan.frames
        );
        assert!(
            stitched_mean >= single_mean - 0.002,
            "{kind:?} v{n}: stitched SSIM {stitched_mean:.5} vs single {single_mean:.5}"
        );
        for &seam in &seams {
            for i in (seam - 5).max(0)..(seam + 6).min(plan.frames) {
                let (got, single_frame) = (s[i as usize], r[i as usize]);
                // The frame beside a seam is as good as the same frame encoded in one pass
                // (the forced keyframe a segment starts with is in both).
                assert!(
                    got >= single_frame - 0.02,
                    "{kind:?} v{n}: frame {i} by seam {seam}: SSIM {got:.4}, single pass {single_frame:.4}"
                );
                assert!(
                    got >= stitched_mean - 0.02,
                    "{kind:?} v{n}: frame {i} by seam {seam}: SSIM {got:.4}, mean {stitched_mean:.4}"
                );
            }
        }
    }

    // Audio: one encode for the whole file, so no seam shows in it.
    if plan.has_audio {
        let samples = audio_samples(&out.mp4).await;
        let seconds = samples.len() as f64 / 48_000.0;
        assert!(
            (seconds - plan.rate.time_of(plan.frames)).abs() <= 1024.0 / 48_000.0 + frame,
            "{kind:?}: {seconds} s of audio"
        );
        let near_seam = |i: usize| {
            let t = i as f64 / 48_000.0;
            seams
                .iter()
                .any(|&s| (t - plan.rate.time_of(s)).abs() <= 0.010)
        };
        // The ends (the sine's first and last samples, padding) are not seams.
        let edge = 4_800;
        let (mut at_seams, mut elsewhere) = (0f32, 0f32);
        for i in edge..samples.len().saturating_sub(edge) {
            let jump = (samples[i] - samples[i - 1]).abs();
            if near_seam(i) {
                at_seams = at_seams.max(jump);
            } else {
                elsewhere = elsewhere.max(jump);
            }
        }
        eprintln!("{kind:?}: largest audio jump at seams {at_seams:.5}, elsewhere {elsewhere:.5}");
        assert!(
            at_seams <= elsewhere,
            "{kind:?}: a jump of {at_seams} at a seam, at most {elsewhere} elsewhere"
        );
    }
}

#[tokio::test]
async fn a_b_frame_heavy_source_stitches_like_a_single_pass() {
    stitched_matches_a_single_pass(SplitSource::BFrameHeavy).await;
}

#[tokio::test]
async fn a_variable_rate_source_stitches_like_a_single_pass() {
    stitched_matches_a_single_pass(SplitSource::VariableRate).await;
}

#[tokio::test]
async fn a_rotated_source_stitches_like_a_single_pass() {
    stitched_matches_a_single_pass(SplitSource::Rotated).await;
}

#[tokio::test]
async fn an_open_gop_hevc_source_stitches_like_a_single_pass() {
    stitched_matches_a_single_pass(SplitSource::OpenGopHevc).await;
}

#[tokio::test]
async fn a_source_whose_audio_starts_late_stitches_like_a_single_pass() {
    stitched_matches_a_single_pass(SplitSource::LateAudio).await;
}

#[tokio::test]
async fn a_source_without_audio_stitches_like_a_single_pass() {
    stitched_matches_a_single_pass(SplitSource::NoAudio).await;
}

#[tokio::test]
async fn a_source_whose_last_chunk_is_shorter_than_a_segment_stitches_like_a_single_pass() {
    stitched_matches_a_single_pass(SplitSource::ShortLastChunk).await;
}
