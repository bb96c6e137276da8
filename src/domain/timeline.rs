//! A source's timeline as both encode paths read it (docs/architecture.md, "One frame rate for
//! both paths"): the frame rate of the output, read from the packets rather than the
//! container's claim; the origin every stream is measured from; how many frames the video has
//! on that grid; how long its sound runs; and how faithfully the grid shows the source's
//! frames. Pure: the timing probe's facts in, a [`Timeline`] out. The whole encode and the
//! split one both take it, so one source gives one frame count whichever path encodes it.

use serde::{Deserialize, Serialize};

/// A frame rate as FFmpeg writes it (`30000/1001`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rate {
    /// Frames...
    pub num: i64,
    /// ...per this many seconds.
    pub den: i64,
}

impl Rate {
    /// `"30000/1001"`; `None` for `0/0`, a zero or negative part, or text that is not a ratio.
    pub fn parse(text: &str) -> Option<Self> {
        let (num, den) = text.split_once('/')?;
        let (num, den): (i64, i64) = (num.trim().parse().ok()?, den.trim().parse().ok()?);
        (num > 0 && den > 0).then_some(Self { num, den })
    }

    /// Frames per second.
    pub fn per_second(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// The first frame shown at or after `seconds` (a whole number of seconds) from the origin.
    pub fn first_frame_at(self, seconds: i64) -> i64 {
        // ceil(seconds * num / den), in integers: exact for any rate.
        (seconds * self.num + self.den - 1) / self.den
    }

    /// When frame `index` is shown, in seconds from the origin.
    pub fn time_of(self, index: i64) -> f64 {
        index as f64 * self.den as f64 / self.num as f64
    }

    /// `num/den`, as FFmpeg's options take it.
    pub fn ffmpeg(self) -> String {
        format!("{}/{}", self.num, self.den)
    }

    /// A measured rate as a ratio in thousandths of a frame (`47.952` is `47952/1000`).
    fn measured(per_second: f64) -> Self {
        let num = (per_second * 1000.0).round().max(1.0) as i64;
        let divisor = gcd(num, 1000);
        Self {
            num: num / divisor,
            den: 1000 / divisor,
        }
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs().max(1)
    } else {
        gcd(b, a % b)
    }
}

/// Rates a measured rate snaps to when it is within [`SNAP`] of one.
const COMMON_RATES: &[Rate] = &[
    Rate { num: 15, den: 1 },
    Rate {
        num: 24000,
        den: 1001,
    },
    Rate { num: 24, den: 1 },
    Rate { num: 25, den: 1 },
    Rate {
        num: 30000,
        den: 1001,
    },
    Rate { num: 30, den: 1 },
    Rate { num: 48, den: 1 },
    Rate { num: 50, den: 1 },
    Rate {
        num: 60000,
        den: 1001,
    },
    Rate { num: 60, den: 1 },
    Rate { num: 90, den: 1 },
    Rate { num: 100, den: 1 },
    Rate {
        num: 120000,
        den: 1001,
    },
    Rate { num: 120, den: 1 },
];

/// How far (a fraction) a measured rate may be from a common rate and still be taken as it.
const SNAP: f64 = 0.015;

/// The shortest stretch whose rate counts as sustained, in seconds.
const SUSTAINED_SECS: f64 = 1.0;

/// How far ahead of the video the sound may start and still count as starting with it: an
/// AAC track's first packet is timed a frame or two early (the encoder's priming, which the
/// decoder drops), and that is no lead to hold a picture for.
const PRIMING_SECS: f64 = 0.05;

/// How much longer than the picture the sound must run for the picture to be held to its end:
/// AAC pads its last frame (tens of milliseconds), and that is no sound to hold a picture for.
const OUTLASTS_SECS: f64 = 0.5;

/// The share of frames the grid may drop or hold unevenly before a source counts as off-grid:
/// the split path then leaves it to the whole encode, which keeps its own timing.
pub const MAX_OFF_GRID: f64 = 0.01;

/// What the timing probe read of a source (one demux pass, nothing decoded).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StreamTiming {
    /// The first video stream's base rate (`r_frame_rate`).
    pub base_rate: Option<Rate>,
    /// Its average rate (`avg_frame_rate`).
    pub average_rate: Option<Rate>,
    /// The video's frames' presentation times, ascending, each once, in seconds on the
    /// container's clock.
    pub frame_times: Vec<f64>,
    /// Presentation times of the keyframes among them, ascending.
    pub keyframe_times: Vec<f64>,
    /// When the last video frame ends (its time plus its duration), in seconds.
    pub end_secs: Option<f64>,
    /// Display rotation in degrees (0, 90, 180, 270 are the ones vidq can stitch).
    pub rotation: i32,
    /// The first audio stream's start and end, in seconds, if it has packets.
    pub audio_span: Option<(f64, f64)>,
}

impl StreamTiming {
    /// The first video frame's time (the stream's start).
    pub fn video_start_secs(&self) -> Option<f64> {
        self.frame_times.first().copied()
    }

    /// Where an input seek must land for a decode to show frame slot `first` of `timeline`
    /// as the source shows it: on the keyframe at or before the last frame shown before that
    /// slot, so the frame a pause holds reaches the chunk. `None`: no frame (or no keyframe)
    /// comes before it, so the decode starts at the beginning and the first frame is held
    /// back to the origin.
    pub fn seek_for(&self, timeline: &Timeline, first: i64) -> Option<f64> {
        // A frame belongs to the slot its time rounds to (the `fps` filter's rule): slot
        // `first` starts half a frame before its time.
        let slot_start =
            timeline.origin_secs + timeline.rate.time_of(first) - timeline.rate.time_of(1) / 2.0;
        let before = self.frame_times.partition_point(|&t| t < slot_start);
        let last_before = *self.frame_times.get(before.checked_sub(1)?)?;
        let key = self.keyframe_times.partition_point(|&t| t <= last_before);
        self.keyframe_times.get(key.checked_sub(1)?).copied()
    }
}

/// A source's timeline, for either encode path.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// The output's frame rate.
    pub rate: Rate,
    /// Time zero of the output, on the source's clock: the earlier of the first video frame
    /// and the first audio sample (video that starts late holds its first frame until then).
    pub origin_secs: f64,
    /// Frames of video on the grid, from the origin to the end of the last frame, or to the end
    /// of the sound where it outlasts the picture (by over [`OUTLASTS_SECS`]): the last frame
    /// is held, so every player plays all of the sound, an HLS one included.
    pub frames: i64,
    /// How long the last frame is held past its own end (0 unless the sound outlasts it).
    pub hold_secs: f64,
    /// Seconds of sound from the origin to the end of the audio (0 without audio).
    pub audio_secs: f64,
    /// The share of the source's frames the grid drops or holds unevenly (see
    /// [`off_grid_share`]).
    pub off_grid: f64,
    /// Whether the rate is `VIDQ_MAX_FPS` because the source ran faster.
    pub capped: bool,
}

impl Timeline {
    /// Seconds of video from the origin.
    pub fn video_secs(&self) -> f64 {
        self.rate.time_of(self.frames)
    }

    /// Seconds of the source's own picture from the origin (the video less the held last
    /// frame).
    pub fn picture_secs(&self) -> f64 {
        self.video_secs() - self.hold_secs
    }

    /// The output's length: its video or its sound, whichever runs longer.
    pub fn duration_secs(&self) -> f64 {
        self.video_secs().max(self.audio_secs)
    }

    /// Whether one grid shows the source faithfully (at most [`MAX_OFF_GRID`] of its frames
    /// dropped or held unevenly).
    pub fn faithful(&self) -> bool {
        self.off_grid <= MAX_OFF_GRID
    }
}

/// Why a source has no timeline: the encode keeps the source's own timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoTimeline {
    /// No frame rate, declared or measurable.
    NoFrameRate,
    /// No packet times to measure its length by.
    NoLength,
}

/// The timeline of `timing`, its rate capped at `max_fps`.
pub fn timeline(timing: &StreamTiming, max_fps: u32) -> Result<Timeline, NoTimeline> {
    let start = timing.video_start_secs().ok_or(NoTimeline::NoLength)?;
    let (rate, capped) = output_rate(timing, max_fps).ok_or(NoTimeline::NoFrameRate)?;
    // The last frame lasts what its packet says, but no longer than a slot where the stream
    // runs faster than it declares (an MKV's default duration of 1/30 s on 50 fps packets).
    let last = timing.frame_times.last().copied().unwrap_or(start);
    let end = timing
        .end_secs
        .map(|end| {
            if last < end {
                end.min(last + rate.time_of(1)).max(last)
            } else {
                end
            }
        })
        .filter(|end| *end > start)
        .ok_or(NoTimeline::NoLength)?;
    let origin = match timing.audio_span {
        Some((audio_start, _)) if audio_start < start - PRIMING_SECS => audio_start,
        _ => start,
    };
    let hold = match timing.audio_span {
        Some((_, audio_end)) if audio_end > end + OUTLASTS_SECS => audio_end - end,
        _ => 0.0,
    };
    let frames = ((end + hold - origin) * rate.per_second()).round() as i64;
    let audio_secs = timing
        .audio_span
        .map_or(0.0, |(_, audio_end)| (audio_end - origin).max(0.0));
    Ok(Timeline {
        rate,
        origin_secs: origin,
        frames,
        hold_secs: hold,
        audio_secs,
        off_grid: off_grid_share(&timing.frame_times, origin, rate, capped),
        capped,
    })
}

/// The output rate: the declared rate when the frames keep to it, else the rate of the
/// densest sustained stretch snapped to a common rate; at most `max_fps`. Whether it was
/// capped.
fn output_rate(timing: &StreamTiming, max_fps: u32) -> Option<(Rate, bool)> {
    let sane = |r: &Rate| (1.0..=1000.0).contains(&r.per_second());
    let densest = densest_rate(&timing.frame_times);
    let origin = timing.video_start_secs().unwrap_or(0.0);
    let declared = [timing.base_rate, timing.average_rate]
        .into_iter()
        .flatten()
        .filter(sane)
        .find(|rate| {
            // The frames keep to it: their densest stretch runs at it (a time base or an
            // average is no frame rate), and it shows them evenly.
            densest.is_none_or(|d| (d - rate.per_second()).abs() <= rate.per_second() * SNAP)
                && off_grid_share(&timing.frame_times, origin, *rate, false) <= MAX_OFF_GRID
        });
    let rate = match (declared, densest) {
        (Some(rate), _) => rate,
        (None, Some(d)) => COMMON_RATES
            .iter()
            .copied()
            .min_by(|a, b| {
                let off = |r: &Rate| (r.per_second() - d).abs();
                off(a).total_cmp(&off(b))
            })
            .filter(|r| (r.per_second() - d).abs() <= d * SNAP)
            .unwrap_or_else(|| Rate::measured(d)),
        (None, None) => [timing.average_rate, timing.base_rate]
            .into_iter()
            .flatten()
            .find(sane)?,
    };
    let cap = Rate {
        num: i64::from(max_fps.max(1)),
        den: 1,
    };
    Some(if rate.per_second() > cap.per_second() {
        (cap, true)
    } else {
        (rate, false)
    })
}

/// The highest rate the frames keep up for [`SUSTAINED_SECS`] or more (frames per second
/// over the shortest run of frames spanning that long); the whole span's rate for a shorter
/// source; `None` with fewer than two frames.
fn densest_rate(times: &[f64]) -> Option<f64> {
    let (&first, &last) = (times.first()?, times.last()?);
    if last <= first {
        return None;
    }
    if last - first < SUSTAINED_SECS {
        return Some((times.len() - 1) as f64 / (last - first));
    }
    let mut best: f64 = 0.0;
    let mut j = 0;
    for i in 0..times.len() {
        while j < times.len() && times[j] - times[i] < SUSTAINED_SECS {
            j += 1;
        }
        if j == times.len() {
            break;
        }
        best = best.max((j - i) as f64 / (times[j] - times[i]));
    }
    Some(best)
}

/// The share of frames (at `times`) that a grid of `rate` from `origin` drops or holds
/// unevenly. A frame is placed in the slot its time rounds to, as the `fps` filter places it;
/// it is *dropped* when the next frame takes the same slot though it came at least three
/// quarters of a slot later (frames that come faster than the grid, where the grid is
/// `capped`, are meant to be dropped), and *held unevenly* when it stays on screen half a slot
/// or more longer than it lasts in the source (24 fps on a 30 fps grid: one frame in four).
/// A 30 fps stretch on a 60 fps grid holds each frame for exactly two slots, and a pause holds
/// its last frame for exactly the pause: neither is counted.
pub fn off_grid_share(times: &[f64], origin: f64, rate: Rate, capped: bool) -> f64 {
    if times.len() < 2 {
        return 0.0;
    }
    let per_second = rate.per_second();
    let slot = |t: f64| ((t - origin) * per_second).round();
    let mut off = 0usize;
    for pair in times.windows(2) {
        let ideal = (pair[1] - pair[0]) * per_second;
        let held = slot(pair[1]) - slot(pair[0]);
        let dropped = held < 0.5 && ideal >= 0.75 && !(capped && ideal < 1.0);
        let uneven = held >= 1.5 && held - ideal >= 0.5;
        if dropped || uneven {
            off += 1;
        }
    }
    off as f64 / times.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames at `rate` fps from `from` for `seconds`.
    fn run(from: f64, rate: f64, seconds: f64) -> Vec<f64> {
        let n = (seconds * rate).round() as usize;
        (0..n).map(|i| from + i as f64 / rate).collect()
    }

    fn timing(frames: Vec<f64>, base: &str, average: &str) -> StreamTiming {
        let end = frames.last().copied().unwrap_or(0.0)
            + frames
                .windows(2)
                .last()
                .map_or(0.04, |pair| pair[1] - pair[0]);
        StreamTiming {
            base_rate: Rate::parse(base),
            average_rate: Rate::parse(average),
            keyframe_times: frames.iter().step_by(30).copied().collect(),
            frame_times: frames,
            end_secs: Some(end),
            ..StreamTiming::default()
        }
    }

    #[test]
    fn a_constant_rate_keeps_its_own_declared_ratio() {
        let t = timing(run(0.0, 30.0, 20.0), "30/1", "30/1");
        let line = timeline(&t, 60).unwrap();
        assert_eq!(line.rate, Rate { num: 30, den: 1 });
        assert_eq!(line.frames, 600);
        assert_eq!(line.off_grid, 0.0);
        let ntsc = timing(run(0.0, 30000.0 / 1001.0, 20.0), "30000/1001", "30000/1001");
        assert_eq!(
            timeline(&ntsc, 60).unwrap().rate,
            Rate {
                num: 30000,
                den: 1001
            }
        );
    }

    #[test]
    fn a_phone_clip_at_60_and_30_fps_keeps_60_and_counts_nothing_off_grid() {
        let mut frames = run(0.0, 60.0, 10.0);
        frames.extend(run(10.0, 30.0, 10.0));
        frames.extend(run(20.0, 60.0, 10.0));
        // A phone's average, and a base rate of its time base.
        let t = timing(frames, "600/1", "45/1");
        let line = timeline(&t, 60).unwrap();
        assert_eq!(line.rate, Rate { num: 60, den: 1 });
        assert_eq!(line.frames, 1800);
        assert_eq!(line.off_grid, 0.0, "30 fps on 60 holds each frame twice");
    }

    #[test]
    fn packets_timed_faster_than_the_declared_rate_set_the_rate() {
        let mut t = timing(run(0.0, 50.0, 30.0), "30/1", "30/1");
        // The last packet's duration is the declared 1/30 s.
        t.end_secs = Some(29.98 + 1.0 / 30.0);
        let line = timeline(&t, 60).unwrap();
        assert_eq!(line.rate, Rate { num: 50, den: 1 });
        assert_eq!(line.frames, 1500);
    }

    #[test]
    fn a_rate_above_the_cap_is_capped_and_its_regular_drops_are_not_off_grid() {
        let t = timing(run(0.0, 120.0, 5.0), "120/1", "120/1");
        let line = timeline(&t, 60).unwrap();
        assert_eq!((line.rate, line.capped), (Rate { num: 60, den: 1 }, true));
        assert_eq!(line.frames, 300);
        assert!(line.faithful(), "{}", line.off_grid);
    }

    #[test]
    fn thirty_then_twenty_four_fps_is_off_grid() {
        let mut frames = run(0.0, 30.0, 10.0);
        frames.extend(run(10.0, 24.0, 10.0));
        let t = timing(frames, "120/1", "2700/100");
        let line = timeline(&t, 60).unwrap();
        assert_eq!(line.rate, Rate { num: 30, den: 1 });
        assert!(!line.faithful(), "{}", line.off_grid);
    }

    #[test]
    fn a_pause_holds_the_last_frame_and_is_not_off_grid() {
        let mut frames = run(0.0, 30.0, 5.0);
        frames.extend(run(12.0, 30.0, 20.0));
        let t = timing(frames, "30/1", "2000/100");
        let line = timeline(&t, 60).unwrap();
        assert_eq!(line.rate, Rate { num: 30, den: 1 });
        assert_eq!(line.frames, 960, "32 s on the grid, the pause included");
        assert_eq!(line.off_grid, 0.0);
        // Slot 240 (8 s) is inside the pause: its seek lands on the keyframe before the last
        // frame before the pause (frame 149, at 4.967 s; keyframes every 30 frames).
        let seek = t.seek_for(&line, 240).unwrap();
        assert!((seek - 4.0).abs() < 1e-9, "{seek}");
        assert_eq!(t.seek_for(&line, 0), None);
    }

    #[test]
    fn video_that_starts_after_the_audio_is_timed_from_the_audio() {
        let mut t = timing(run(10.0, 25.0, 30.0), "25/1", "25/1");
        t.audio_span = Some((0.0, 40.0));
        let line = timeline(&t, 60).unwrap();
        assert_eq!(line.origin_secs, 0.0);
        assert_eq!(
            line.frames, 1000,
            "40 s of video: the first frame held for 10 s"
        );
        assert_eq!(t.seek_for(&line, 200), None, "8 s: no frame before it");
        assert!((line.duration_secs() - 40.0).abs() < 1e-9);
    }

    #[test]
    fn an_aac_tracks_priming_is_no_lead() {
        let mut t = timing(run(0.0, 25.0, 20.0), "25/1", "25/1");
        t.audio_span = Some((-1024.0 / 48_000.0, 20.0));
        let line = timeline(&t, 60).unwrap();
        assert_eq!((line.origin_secs, line.frames), (0.0, 500));
    }

    #[test]
    fn audio_longer_than_the_video_sets_the_duration() {
        let mut t = timing(run(0.0, 25.0, 16.0), "25/1", "25/1");
        t.audio_span = Some((0.0, 40.0));
        let line = timeline(&t, 60).unwrap();
        assert_eq!(line.frames, 1000, "the last frame held to the sound's end");
        assert!((line.picture_secs() - 16.0).abs() < 1e-9);
        assert!((line.duration_secs() - 40.0).abs() < 1e-9);
        // An AAC track's padding past the picture holds nothing.
        t.audio_span = Some((0.0, 16.021));
        assert_eq!(timeline(&t, 60).unwrap().frames, 400);
    }

    #[test]
    fn a_source_that_starts_late_on_its_clock_is_timed_from_its_first_frame() {
        let t = timing(run(10.0, 30.0, 20.0), "30/1", "30/1");
        let line = timeline(&t, 60).unwrap();
        assert_eq!((line.origin_secs, line.frames), (10.0, 600));
        let seek = t.seek_for(&line, 240).unwrap();
        assert!((seek - 17.0).abs() < 1e-9, "{seek}");
    }

    #[test]
    fn a_rate_between_common_ones_is_kept_as_measured() {
        let t = timing(run(0.0, 37.5, 10.0), "0/0", "0/0");
        let line = timeline(&t, 60).unwrap();
        assert_eq!(line.rate, Rate { num: 75, den: 2 });
    }
}
