//! The filters both encode paths share, so a chunk and a whole encode put a source on the same
//! timeline and scale it the same way (docs/architecture.md, "One frame rate for both paths").

use crate::domain::timeline::Rate;

/// The sound every encode writes: AAC at 48 kHz.
pub(super) const AUDIO_RATE: i64 = 48_000;

/// Scales a frame to at most `side` on its short side (landscape: the height; portrait: the
/// width), never up, and to even sides, which 4:2:0 needs: the short side is rounded down
/// (a 361-line source gives 360), the long one keeps the aspect ratio (`-2`).
pub(super) fn scale_filter(side: i32) -> String {
    format!(
        "scale=w='if(gte(iw,ih),-2,min({side},trunc(iw/2)*2))':h='if(gte(iw,ih),min({side},trunc(ih/2)*2),-2)'"
    )
}

/// Puts the first video stream on a timeline's grid (docs/architecture.md, "One frame rate
/// for both paths"): its origin moved to 0, the `fps` filter making it `rate` (a frame is
/// held, or dropped, where the source has none, or two, in a slot), and its last frame held
/// `hold_secs` (sound that outlasts the picture) and a little more, so the grid's last slots
/// exist for the `trim` that follows. With `held_from_origin` the first frame is also held
/// back to the origin (video that starts after its sound).
pub(super) fn grid_filter(
    rate: Rate,
    origin_secs: f64,
    held_from_origin: bool,
    hold_secs: f64,
) -> String {
    format!(
        "setpts=PTS-{origin_secs:.6}/TB,fps={rate}{start},\
         tpad=stop_mode=clone:stop_duration={hold:.3}",
        hold = hold_secs + 2.0,
        rate = rate.ffmpeg(),
        start = if held_from_origin {
            ":start_time=0"
        } else {
            ""
        },
    )
}

/// The sound on a timeline: its origin moved to 0 (a late start filled with silence), resampled
/// to AAC's 48 kHz stereo, and exactly `samples` long (a short track padded with silence to
/// the video's length; a long one kept whole, since `samples` counts all of it).
pub(super) fn audio_filter(origin_secs: f64, samples: i64) -> String {
    format!(
        "asetpts=PTS-{origin_secs:.6}/TB,aresample={AUDIO_RATE}:async=1:first_pts=0,\
         aformat=sample_fmts=fltp:sample_rates={AUDIO_RATE}:channel_layouts=stereo,\
         apad=whole_len={samples},atrim=end_sample={samples}"
    )
}
