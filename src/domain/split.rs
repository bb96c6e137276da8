//! Split-and-stitch: whether a probed source is split into parts, and the plan that every part
//! and the stitch follow (docs/architecture.md, "One long video on every worker"). Pure: the
//! probe's facts in, a plan out.
//!
//! The plan puts the video on a frame grid: frame `i` is shown at `origin + i / rate`. Chunks
//! are frame ranges of that grid whose starts fall on the segment grid (a chunk lasts a whole
//! number of segments), so every chunk begins with the keyframe that begins its first segment,
//! and keyframes land on the same frames whether the video is encoded whole or in chunks.

use serde::{Deserialize, Serialize};

use super::media::MediaInfo;
use super::timeline::{NoTimeline, Timeline};
pub use super::timeline::{Rate, StreamTiming};

/// How splitting is configured (`VIDQ_CHUNK_SECS`, `VIDQ_CHUNK_MIN_SOURCE_SECS`, and the
/// segment length chunks are measured in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitSettings {
    /// Sources longer than this many seconds are split; `0` never splits.
    pub min_source_secs: u32,
    /// A chunk's length in seconds: a whole number of segments.
    pub chunk_secs: u32,
    /// The HLS segment length in seconds.
    pub segment_secs: u32,
}

impl SplitSettings {
    /// The defaults: sources over 120 s, chunks of 48 s, segments of 4 s.
    pub const DEFAULT: Self = Self {
        min_source_secs: 120,
        chunk_secs: 48,
        segment_secs: 4,
    };

    /// Checks that a chunk is a whole number of segments (each chunk must start a segment).
    pub fn check(self) -> Result<Self, String> {
        if self.segment_secs == 0 || self.chunk_secs == 0 {
            return Err("the chunk and segment lengths must be at least 1 s".into());
        }
        if !self.chunk_secs.is_multiple_of(self.segment_secs) {
            return Err(format!(
                "VIDQ_CHUNK_SECS ({}) must be a multiple of VIDQ_SEGMENT_SECS ({})",
                self.chunk_secs, self.segment_secs
            ));
        }
        Ok(self)
    }
}

/// The plan of a split video, stored on its job: every part and the stitch read it, so every
/// chunk is encoded with the same grid, ladder and keyframes whatever worker takes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitPlan {
    /// The output frame rate (the grid).
    pub rate: Rate,
    /// The grid's origin: the first video frame's time in the source, in seconds.
    pub origin_secs: f64,
    /// Frames the whole video has on the grid: its length from the origin to the end of its
    /// last frame, at the grid's rate (a constant-rate source's own frame count).
    pub frames: i64,
    /// The first frame of each chunk; the last chunk ends at `frames`.
    pub chunk_starts: Vec<i64>,
    /// Where each chunk's decode starts, in seconds on the source's clock (the keyframe at or
    /// before the last frame shown before the chunk); `None`: from the beginning, the first
    /// frame held back to the origin. Empty in a plan made before vidq stored them: each
    /// chunk then starts [`LEGACY_PREROLL_SECS`] early.
    #[serde(default)]
    pub seeks: Vec<Option<f64>>,
    /// How long the last frame is held past its own end, where the sound outlasts the picture
    /// (0 in a plan made before vidq stored it).
    #[serde(default)]
    pub hold_secs: f64,
    /// Seconds of sound from the origin (0: as long as the video, in a plan made before vidq
    /// stored it). The audio part keeps all of it; the video keeps its last frame on screen.
    #[serde(default)]
    pub audio_secs: f64,
    /// HLS segment length in seconds: a keyframe starts every segment.
    pub segment_secs: u32,
    /// Short sides of the renditions, largest first (the ladder as the planning worker had it).
    pub short_sides: Vec<i32>,
    /// Whether the source has audio (then an audio part runs beside the chunks).
    pub has_audio: bool,
    /// What the probe found, for the READY finalize.
    pub media: PlannedMedia,
}

/// [`MediaInfo`] as the plan stores it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlannedMedia {
    /// Demuxer.
    pub container: String,
    /// Duration in milliseconds.
    pub duration_ms: i64,
    /// Video codec.
    pub video_codec: String,
    /// Displayed width.
    pub width: i32,
    /// Displayed height.
    pub height: i32,
    /// Frame rate of the grid.
    pub fps: f64,
    /// Audio codec, if any.
    pub audio_codec: Option<String>,
}

impl From<&PlannedMedia> for MediaInfo {
    fn from(m: &PlannedMedia) -> Self {
        Self {
            container: m.container.clone(),
            duration_ms: m.duration_ms,
            video_codec: m.video_codec.clone(),
            width: m.width,
            height: m.height,
            fps: m.fps,
            audio_codec: m.audio_codec.clone(),
        }
    }
}

/// One chunk: frames `first..end` of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRange {
    /// The chunk's number (0 first).
    pub part: i32,
    /// Its first frame on the grid.
    pub first: i64,
    /// One past its last frame.
    pub end: i64,
}

/// How far before its first frame a chunk of a plan without `seeks` starts its decode.
pub const LEGACY_PREROLL_SECS: f64 = 3.0;

impl SplitPlan {
    /// Where chunk `part`'s decode starts, on the source's clock (see [`SplitPlan::seeks`]).
    pub fn seek(&self, part: i32) -> Option<f64> {
        let index = usize::try_from(part).ok()?;
        match self.seeks.get(index) {
            Some(seek) => *seek,
            None if part == 0 => None,
            None => {
                let first = *self.chunk_starts.get(index)?;
                Some((self.origin_secs + self.rate.time_of(first) - LEGACY_PREROLL_SECS).max(0.0))
            }
        }
    }

    /// Samples of sound the output has at `sample_rate`: the audio's length, or the video's
    /// where it is longer (silence fills the rest).
    pub fn audio_samples(&self, sample_rate: i64) -> i64 {
        let seconds = self.rate.time_of(self.frames).max(self.audio_secs);
        (seconds * sample_rate as f64).round() as i64
    }

    /// How many chunks.
    pub fn chunks(&self) -> i32 {
        i32::try_from(self.chunk_starts.len()).unwrap_or(i32::MAX)
    }

    /// The parts to enqueue: every chunk, then the audio (if any), numbered from 0.
    pub fn parts(&self) -> i32 {
        self.chunks() + i32::from(self.has_audio)
    }

    /// The audio part's number, if there is one.
    pub fn audio_part(&self) -> Option<i32> {
        self.has_audio.then(|| self.chunks())
    }

    /// Chunk `part`'s frame range; `None` if there is no such chunk.
    pub fn chunk(&self, part: i32) -> Option<ChunkRange> {
        let index = usize::try_from(part).ok()?;
        let first = *self.chunk_starts.get(index)?;
        Some(ChunkRange {
            part,
            first,
            end: self
                .chunk_starts
                .get(index + 1)
                .copied()
                .unwrap_or(self.frames),
        })
    }

    /// The frames at which a segment starts within `range` (each gets a forced keyframe).
    pub fn segment_starts_in(&self, range: ChunkRange) -> Vec<i64> {
        let end = range.end;
        let seg = i64::from(self.segment_secs);
        let mut starts = Vec::new();
        let mut k = (range.first * self.rate.den) / (seg * self.rate.num);
        loop {
            let frame = self.rate.first_frame_at(k * seg);
            if frame >= end {
                break;
            }
            if frame >= range.first {
                starts.push(frame);
            }
            k += 1;
        }
        starts
    }
}

/// Why a split video is encoded whole after its parts began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The stitched video failed its checks.
    StitchCheck,
    /// A chunk's output failed its checks (its frame count, or its first keyframe).
    ChunkCheck,
    /// A part failed for good (a permanent error, or its last attempt).
    PartFailed,
}

impl Fallback {
    /// The reason as a metric label (`vidq_worker_split_fallbacks_total{reason}`).
    pub fn label(self) -> &'static str {
        match self {
            Self::StitchCheck => "stitch_check",
            Self::ChunkCheck => "chunk_check",
            Self::PartFailed => "part_failed",
        }
    }
}

/// Why a source is encoded as one job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WholeBecause {
    /// Splitting is off (`VIDQ_CHUNK_MIN_SOURCE_SECS=0`).
    SplittingOff,
    /// Not longer than `VIDQ_CHUNK_MIN_SOURCE_SECS`.
    Short,
    /// No usable frame rate to put the frames on a grid.
    NoFrameRate,
    /// No packet times to measure its length on the grid.
    NoLength,
    /// A rotation other than a quarter turn.
    OddRotation,
    /// Fewer than two chunks' worth of frames.
    OneChunk,
    /// One grid would drop or hold unevenly more than 1% of its frames (see
    /// [`crate::domain::timeline::off_grid_share`]): the whole encode keeps its own timing.
    OffGrid,
}

impl From<NoTimeline> for WholeBecause {
    fn from(no: NoTimeline) -> Self {
        match no {
            NoTimeline::NoFrameRate => Self::NoFrameRate,
            NoTimeline::NoLength => Self::NoLength,
        }
    }
}

impl WholeBecause {
    /// The log's sentence.
    pub fn sentence(self) -> &'static str {
        match self {
            Self::SplittingOff => "splitting is off (VIDQ_CHUNK_MIN_SOURCE_SECS=0)",
            Self::Short => "the source is not longer than VIDQ_CHUNK_MIN_SOURCE_SECS",
            Self::NoFrameRate => "the source has no frame rate to put its frames on a grid",
            Self::NoLength => "the source's packets carry no times to measure it by",
            Self::OddRotation => "the source's rotation is not a quarter turn",
            Self::OneChunk => "the source fills only one chunk",
            Self::OffGrid => "one frame grid would drop or hold unevenly over 1% of its frames",
        }
    }
}

/// Whether `media` is split, and how: `timing` is what the timing probe read, `timeline`
/// the grid both paths put it on (`Err`: it has none), `short_sides` the ladder.
pub fn decide(
    settings: SplitSettings,
    media: &MediaInfo,
    timing: &StreamTiming,
    timeline: Result<&Timeline, NoTimeline>,
    short_sides: Vec<i32>,
) -> Result<SplitPlan, WholeBecause> {
    if settings.min_source_secs == 0 {
        return Err(WholeBecause::SplittingOff);
    }
    if media.duration_ms <= i64::from(settings.min_source_secs) * 1000 {
        return Err(WholeBecause::Short);
    }
    if !matches!(timing.rotation.rem_euclid(360), 0 | 90 | 180 | 270) {
        return Err(WholeBecause::OddRotation);
    }
    let timeline = timeline?;
    if !timeline.faithful() {
        return Err(WholeBecause::OffGrid);
    }
    let (rate, frames) = (timeline.rate, timeline.frames);
    let chunk = i64::from(settings.chunk_secs);
    let mut chunk_starts = vec![0];
    loop {
        let next = rate.first_frame_at(chunk * chunk_starts.len() as i64);
        if next >= frames {
            break;
        }
        chunk_starts.push(next);
    }
    if chunk_starts.len() < 2 {
        return Err(WholeBecause::OneChunk);
    }
    let seeks = chunk_starts
        .iter()
        .map(|&first| timing.seek_for(timeline, first))
        .collect();
    Ok(SplitPlan {
        rate,
        origin_secs: timeline.origin_secs,
        frames,
        chunk_starts,
        seeks,
        hold_secs: timeline.hold_secs,
        audio_secs: timeline.audio_secs,
        segment_secs: settings.segment_secs,
        short_sides,
        has_audio: media.has_audio(),
        media: PlannedMedia {
            container: media.container.clone(),
            duration_ms: (timeline.duration_secs() * 1000.0).round() as i64,
            video_codec: media.video_codec.clone(),
            width: media.width,
            height: media.height,
            fps: rate.per_second(),
            audio_codec: media.audio_codec.clone(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn media(seconds: i64, audio: bool) -> MediaInfo {
        MediaInfo {
            container: "mov,mp4,m4a,3gp,3g2,mj2".into(),
            duration_ms: seconds * 1000,
            video_codec: "h264".into(),
            width: 1280,
            height: 720,
            fps: 30.0,
            audio_codec: audio.then(|| "aac".into()),
        }
    }

    /// Frames at the base rate (or 29.97 fps where it has none) for `seconds`, a keyframe a
    /// second, audio over the same span.
    fn timing(base: &str, average: &str, seconds: f64) -> StreamTiming {
        let fps = Rate::parse(base).map_or(30000.0 / 1001.0, Rate::per_second);
        let frames: Vec<f64> = (0..(seconds * fps).round() as i64)
            .map(|i| i as f64 / fps)
            .collect();
        StreamTiming {
            base_rate: Rate::parse(base),
            average_rate: Rate::parse(average),
            keyframe_times: frames
                .iter()
                .step_by(fps.round() as usize)
                .copied()
                .collect(),
            frame_times: frames,
            end_secs: Some(seconds),
            audio_span: Some((0.0, seconds)),
            ..StreamTiming::default()
        }
    }

    fn decide(
        settings: SplitSettings,
        media: &MediaInfo,
        timing: &StreamTiming,
        sides: Vec<i32>,
    ) -> Result<SplitPlan, WholeBecause> {
        let line = crate::domain::timeline::timeline(timing, 60);
        super::decide(
            settings,
            media,
            timing,
            line.as_ref().map_err(|e| *e),
            sides,
        )
    }

    #[test]
    fn a_long_constant_rate_source_is_split_on_the_segment_grid() {
        let plan = decide(
            SplitSettings::DEFAULT,
            &media(600, true),
            &timing("30/1", "30/1", 600.0),
            vec![720],
        )
        .unwrap();
        assert_eq!(plan.frames, 18_000);
        assert_eq!(plan.chunks(), 13, "600 s in 48 s chunks");
        assert_eq!(plan.chunk_starts[1], 1440);
        assert_eq!(plan.parts(), 14, "13 chunks and the audio");
        assert_eq!(plan.audio_part(), Some(13));
        let last = plan.chunk(12).unwrap();
        assert_eq!((last.first, last.end), (12 * 1440, 18_000));
        let first = plan.chunk(0).unwrap();
        assert_eq!(
            plan.segment_starts_in(first),
            (0..12).map(|k| k * 120).collect::<Vec<_>>()
        );
    }

    #[test]
    fn an_ntsc_rate_keeps_chunks_and_keyframes_on_whole_frames() {
        let plan = decide(
            SplitSettings::DEFAULT,
            &media(300, false),
            &timing("30000/1001", "30000/1001", 300.0),
            vec![720],
        )
        .unwrap();
        // 48 s at 29.97 fps is 1438.56 frames: chunk 1 starts at the first frame at or after 48 s.
        assert_eq!(plan.chunk_starts[..3], [0, 1439, 2878]);
        assert_eq!(plan.audio_part(), None);
        let second = plan.chunk(1).unwrap();
        assert_eq!(plan.frames, 8991);
        let keys = plan.segment_starts_in(second);
        assert_eq!(keys[0], 1439, "the chunk starts on a segment's keyframe");
        assert_eq!(keys[1], 1559, "52 s is frame 1558.4, so 1559");
        assert!(keys.iter().all(|k| (1439..2878).contains(k)));
    }

    #[test]
    fn every_chunk_but_the_first_seeks_to_the_keyframe_before_its_first_frame() {
        let plan = decide(
            SplitSettings::DEFAULT,
            &media(200, true),
            &timing("25/1", "25/1", 200.0),
            vec![720],
        )
        .unwrap();
        assert_eq!(plan.seek(0), None);
        // Chunk 1 starts at 48 s; the last frame before it is at 47.96 s, in the GOP of 47 s.
        assert_eq!(plan.seek(1), Some(47.0));
        let legacy = SplitPlan {
            seeks: Vec::new(),
            ..plan
        };
        assert_eq!(legacy.seek(1), Some(45.0), "a stored plan without seeks");
    }

    #[test]
    fn short_odd_and_rateless_sources_are_encoded_whole_with_a_reason() {
        let s = SplitSettings::DEFAULT;
        let cfr = timing("30/1", "30/1", 600.0);
        assert_eq!(
            decide(s, &media(120, true), &cfr, vec![720]),
            Err(WholeBecause::Short)
        );
        let off = SplitSettings {
            min_source_secs: 0,
            ..s
        };
        assert_eq!(
            decide(off, &media(600, true), &cfr, vec![720]),
            Err(WholeBecause::SplittingOff)
        );
        let mut tilted = cfr.clone();
        tilted.rotation = 45;
        assert_eq!(
            decide(s, &media(600, true), &tilted, vec![720]),
            Err(WholeBecause::OddRotation)
        );
        // One frame held for the whole length, and no rate declared.
        let mut still = timing("0/0", "0/0", 600.0);
        still.frame_times.truncate(1);
        assert_eq!(
            decide(s, &media(600, true), &still, vec![720]),
            Err(WholeBecause::NoFrameRate)
        );
        let mut uneven = cfr.clone();
        uneven.frame_times = (0..18_000).map(|i| f64::from(i) / 24.0).collect();
        uneven
            .frame_times
            .extend((0..3_000).map(|i| 750.0 + f64::from(i) / 30.0));
        uneven.end_secs = Some(850.0);
        assert_eq!(
            decide(s, &media(850, true), &uneven, vec![720]),
            Err(WholeBecause::OffGrid),
            "24 fps, then 30: on one grid one frame in four is held twice"
        );
        let mut unmeasured = cfr.clone();
        unmeasured.end_secs = None;
        assert_eq!(
            decide(s, &media(600, true), &unmeasured, vec![720]),
            Err(WholeBecause::NoLength)
        );
        let long_chunks = SplitSettings {
            chunk_secs: 600,
            ..s
        };
        assert_eq!(
            decide(long_chunks, &media(500, true), &cfr, vec![720]),
            Err(WholeBecause::OneChunk)
        );
    }

    #[test]
    fn a_chunk_must_be_a_whole_number_of_segments() {
        let s = SplitSettings {
            chunk_secs: 50,
            ..SplitSettings::DEFAULT
        };
        assert!(s.check().unwrap_err().contains("multiple"));
        assert!(SplitSettings::DEFAULT.check().is_ok());
    }

    #[test]
    fn a_plan_survives_its_trip_through_json() {
        let plan = decide(
            SplitSettings::DEFAULT,
            &media(600, true),
            &timing("25/1", "25/1", 600.0),
            vec![720, 360],
        )
        .unwrap();
        let back: SplitPlan = serde_json::from_value(serde_json::to_value(&plan).unwrap()).unwrap();
        assert_eq!(back, plan);
    }
}
