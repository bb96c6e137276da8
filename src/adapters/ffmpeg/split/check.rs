//! The checks that gate a stitched video's READY, and a chunk's own: ffprobe lists the video
//! packets of an intermediate or of the stitched MP4 (nothing is decoded), and [`judge`]
//! holds them to the plan: every frame of the grid once, in order, continuous timestamps, a
//! keyframe where each segment starts, audio as long as the video.

use std::ffi::OsString;
use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::super::encode::classify_encode;
use super::super::{MediaConfig, process};
use super::{AAC_FRAME_SAMPLES, AUDIO_RATE, io};
use crate::domain::failure::FailureCode;
use crate::domain::media::MediaError;
use crate::domain::split::{ChunkRange, Rate, SplitPlan};

/// ffprobe on an intermediate vidq wrote (TS or MP4): local file, first video stream; the
/// caller adds what to show before the last argument (the file).
pub(super) fn intermediate_probe(file: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-v",
        "error",
        "-hide_banner",
        "-protocol_whitelist",
        "file",
        "-format_whitelist",
        "mpegts,mov,mp4,m4a,3gp,3g2,mj2",
        "-select_streams",
        "v:0",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.push(file.into());
    args
}

/// One video packet: its presentation time (in the stream's time base) and keyframe flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Presentation timestamp.
    pub pts: i64,
    /// Whether it is a keyframe.
    pub key: bool,
}

/// The video packets of `file` in presentation order, and its time base (listed by ffprobe
/// into a file under `scratch`; nothing is decoded).
async fn packets_with_time_base(
    config: &MediaConfig,
    file: &Path,
    scratch: &Path,
    cancel: &CancellationToken,
) -> Result<(Vec<Packet>, Rate), MediaError> {
    let listing = scratch.join(format!(
        "packets-{}.csv",
        file.file_name().unwrap_or_default().to_string_lossy()
    ));
    let mut args = intermediate_probe(file);
    let show: Vec<OsString> = [
        "-show_entries",
        "stream=time_base:packet=pts,flags",
        "-of",
        "csv=p=0",
        "-o",
    ]
    .iter()
    .map(OsString::from)
    .chain(std::iter::once(listing.clone().into_os_string()))
    .collect();
    args.splice(args.len() - 1..args.len() - 1, show);
    process::run(&config.ffprobe, &args, config.call_timeout, cancel)
        .await
        .map_err(|err| classify_encode(err, file))?;
    let text = tokio::fs::read_to_string(&listing)
        .await
        .map_err(io("reading a packet list"))?;
    let _ = tokio::fs::remove_file(&listing).await;
    parse_packets(&text).ok_or_else(|| {
        MediaError::retryable(
            FailureCode::EncodeFailed,
            format!("unreadable packet list of {}", file.display()),
        )
    })
}

/// Parses `pts,flags` lines and one `num/den` time base line, in any order.
fn parse_packets(text: &str) -> Option<(Vec<Packet>, Rate)> {
    let mut packets = Vec::new();
    let mut time_base = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(rate) = Rate::parse(line) {
            time_base = Some(rate);
            continue;
        }
        let (pts, flags) = line.split_once(',')?;
        packets.push(Packet {
            pts: pts.parse().ok()?,
            key: flags.contains('K'),
        });
    }
    packets.sort_by_key(|p| p.pts);
    Some((packets, time_base?))
}

/// The video packets of an intermediate, in presentation order.
pub(super) async fn video_packets(
    config: &MediaConfig,
    file: &Path,
    scratch: &Path,
    cancel: &CancellationToken,
) -> Result<Vec<Packet>, MediaError> {
    Ok(packets_with_time_base(config, file, scratch, cancel)
        .await?
        .0)
}

/// What a stitched video's checks found wrong: the video is not let READY with it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StitchFault {
    /// Its frame count is not the source's on the grid.
    #[error("{got} frames where the source has {want}")]
    FrameCount {
        /// Frames in the output.
        got: usize,
        /// Frames on the source's grid.
        want: i64,
    },
    /// Frames missing or doubled between two timestamps.
    #[error("a gap of {frames:.2} frames at frame {at}")]
    Gap {
        /// Where (frame index).
        at: usize,
        /// How wide, in frames (0 or less: an overlap).
        frames: f64,
    },
    /// A segment (or a chunk) does not start with a keyframe.
    #[error("no keyframe at frame {0}, where a segment starts")]
    NoKeyframe(i64),
    /// The audio is longer or shorter than the plan's sound (all of the source's, or the
    /// video's length where that is longer) by more than one AAC and one video frame.
    #[error("the audio's length is {0:+.4} s off the planned length")]
    AudioDrift(f64),
}

/// Checks the stitched top rendition's MP4 against the plan: every frame of the grid once, in
/// order, with continuous timestamps, a keyframe where each segment (and so each chunk)
/// starts, and audio as long as the video.
pub async fn check_stitched(
    config: &MediaConfig,
    plan: &SplitPlan,
    mp4: &Path,
    scratch: &Path,
    cancel: &CancellationToken,
) -> Result<Result<(), StitchFault>, MediaError> {
    let (packets, time_base) = packets_with_time_base(config, mp4, scratch, cancel).await?;
    let audio = if plan.has_audio {
        Some(durations(config, mp4, cancel).await?)
    } else {
        None
    };
    Ok(judge(plan, &packets, time_base, audio))
}

/// The checks of [`check_stitched`] on what ffprobe listed (pure). `audio`: the video's and
/// the audio's stream durations, in seconds.
pub fn judge(
    plan: &SplitPlan,
    packets: &[Packet],
    time_base: Rate,
    audio: Option<(f64, f64)>,
) -> Result<(), StitchFault> {
    if packets.len() as i64 != plan.frames {
        return Err(StitchFault::FrameCount {
            got: packets.len(),
            want: plan.frames,
        });
    }
    // A packet's frame index on the grid: pts x time base x rate.
    let index = |p: &Packet| {
        p.pts as f64 * time_base.num as f64 / time_base.den as f64 * plan.rate.per_second()
    };
    let first = packets.first().map_or(0.0, index);
    if first.abs() > 0.5 {
        return Err(StitchFault::Gap {
            at: 0,
            frames: first,
        });
    }
    for (at, pair) in packets.windows(2).enumerate() {
        let step = index(&pair[1]) - index(&pair[0]);
        if !(0.5..=1.5).contains(&step) {
            return Err(StitchFault::Gap {
                at: at + 1,
                frames: step,
            });
        }
    }
    let keyframes: std::collections::HashSet<i64> = packets
        .iter()
        .filter(|p| p.key)
        .map(|p| index(p).round() as i64)
        .collect();
    let whole = ChunkRange {
        part: 0,
        first: 0,
        end: plan.frames,
    };
    if let Some(missing) = plan
        .segment_starts_in(whole)
        .into_iter()
        .find(|frame| !keyframes.contains(frame))
    {
        return Err(StitchFault::NoKeyframe(missing));
    }
    if let Some((_, audio)) = audio {
        let planned = plan.audio_samples(AUDIO_RATE) as f64 / AUDIO_RATE as f64;
        let tolerance = AAC_FRAME_SAMPLES as f64 / AUDIO_RATE as f64 + plan.rate.time_of(1);
        if (audio - planned).abs() > tolerance {
            return Err(StitchFault::AudioDrift(audio - planned));
        }
    }
    Ok(())
}

/// The video's and the audio's stream durations in `mp4`, in seconds.
async fn durations(
    config: &MediaConfig,
    mp4: &Path,
    cancel: &CancellationToken,
) -> Result<(f64, f64), MediaError> {
    let mut args = intermediate_probe(mp4);
    // Both streams: the selection above is for the packet lists.
    let select = args
        .iter()
        .position(|a| a == "-select_streams")
        .expect("the probe selects a stream");
    args.drain(select..select + 2);
    args.splice(
        args.len() - 1..args.len() - 1,
        [
            "-show_entries",
            "stream=codec_type,duration",
            "-of",
            "csv=p=0",
        ]
        .map(OsString::from),
    );
    let text = process::run(&config.ffprobe, &args, config.call_timeout, cancel)
        .await
        .map_err(|err| classify_encode(err, mp4))?;
    let text = String::from_utf8_lossy(&text);
    let mut video = None;
    let mut audio = None;
    for line in text.lines() {
        match line.trim().split_once(',') {
            Some(("video", d)) => video = d.parse::<f64>().ok(),
            Some(("audio", d)) => audio = d.parse::<f64>().ok(),
            _ => {}
        }
    }
    video
        .zip(audio)
        .ok_or_else(|| super::super::encode::missing("audio or video duration in the stitched MP4"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::ffmpeg::split::tests::plan;

    /// Packets of a clean stitched stream in a 1/15360 time base (512 per frame at 30 fps).
    fn clean(frames: i64) -> Vec<Packet> {
        (0..frames)
            .map(|i| Packet {
                pts: i * 512,
                key: i % 120 == 0,
            })
            .collect()
    }

    const TB: Rate = Rate { num: 1, den: 15360 };

    #[test]
    fn a_clean_stitch_passes_and_each_fault_is_named() {
        let plan = plan(300);
        assert_eq!(judge(&plan, &clean(300), TB, Some((10.0, 10.01))), Ok(()));
        assert_eq!(
            judge(&plan, &clean(299), TB, None),
            Err(StitchFault::FrameCount {
                got: 299,
                want: 300
            })
        );
        let mut gap = clean(301);
        gap.remove(150);
        assert!(matches!(
            judge(&plan, &gap, TB, None),
            Err(StitchFault::Gap { at: 150, .. })
        ));
        let mut unkeyed = clean(300);
        unkeyed[240].key = false;
        assert_eq!(
            judge(&plan, &unkeyed, TB, None),
            Err(StitchFault::NoKeyframe(240))
        );
        assert!(matches!(
            judge(&plan, &clean(300), TB, Some((10.0, 10.1))),
            Err(StitchFault::AudioDrift(_))
        ));
    }

    #[test]
    fn packet_lists_are_read_in_presentation_order() {
        let (packets, tb) = parse_packets("1/90000\n3000,K_\n9000,__\n6000,__\n").unwrap();
        assert_eq!(tb, Rate { num: 1, den: 90000 });
        assert_eq!(
            packets.iter().map(|p| p.pts).collect::<Vec<_>>(),
            [3000, 6000, 9000]
        );
        assert!(packets[0].key && !packets[1].key);
    }
}
