//! The encode: one FFmpeg call decodes the source once and writes every rung of the ladder
//! (a `split` filter, one scale per rung), each rung's HLS rendition (fMP4 segments, VOD
//! playlist) through the tee muxer, the top rung's also the progressive MP4 (`moov` first)
//! from the same encode. With more than one rung a master playlist lists them. One more call
//! makes the thumbnail.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::filters::{AUDIO_RATE, audio_filter, grid_filter, scale_filter};
use super::probe::classify;
use super::process;
use super::{DEMUXER_ALLOW_LIST, MediaConfig, PROTOCOL_ALLOW_LIST};
use crate::domain::keys::outputs;
use crate::domain::media::{MediaError, MediaInfo};
use crate::domain::timeline::Timeline;

/// One HLS rendition on disk.
#[derive(Clone, Debug)]
pub struct Rendition {
    /// Where it sits under `hls/`: `""` for a single rendition, `"v0/"`, `"v1/"`... in a ladder.
    pub prefix: String,
    /// Frame size it was scaled to.
    pub width: i32,
    /// Frame size it was scaled to.
    pub height: i32,
    /// Its `init.mp4`.
    pub init: PathBuf,
    /// `seg_00000.m4s`, ... in playback order.
    pub segments: Vec<PathBuf>,
    /// Its media playlist.
    pub playlist: PathBuf,
}

/// The files one encode produced, named as they will be under the attempt's S3 prefix.
#[derive(Clone, Debug)]
pub struct EncodedFiles {
    /// The directory they are in.
    pub dir: PathBuf,
    /// `hls/index.m3u8`: the media playlist of a single rendition, or the master playlist.
    pub playlist: PathBuf,
    /// Largest first.
    pub renditions: Vec<Rendition>,
    /// `video.mp4` (at the top rung).
    pub mp4: PathBuf,
    /// `thumb.jpg`.
    pub thumbnail: PathBuf,
}

/// One encode call of the ladder.
#[derive(Clone, Debug)]
pub struct Rung {
    /// Largest short side of this rendition.
    pub short_side: i32,
    /// `""` or `"v{n}/"`.
    pub prefix: String,
    /// Whether this call also writes the MP4 (the top rung's does).
    pub with_mp4: bool,
}

/// The rungs to encode for a source: the configured short sides at or below the source's own
/// (nothing is upscaled), largest first; a source smaller than every rung gets one rendition
/// at its own size.
pub fn rungs(config: &MediaConfig, info: &MediaInfo) -> Vec<Rung> {
    let source = info.width.min(info.height);
    let mut sides: Vec<i32> = config
        .ladder
        .iter()
        .copied()
        .filter(|s| *s <= source)
        .collect();
    sides.sort_unstable_by(|a, b| b.cmp(a));
    sides.dedup();
    if sides.is_empty() {
        sides.push(source);
    }
    let ladder = sides.len() > 1;
    sides
        .into_iter()
        .enumerate()
        .map(|(n, short_side)| Rung {
            short_side,
            prefix: if ladder {
                format!("v{n}/")
            } else {
                String::new()
            },
            with_mp4: n == 0,
        })
        .collect()
}

/// The frame size a rung scales the source to (what [`super::filters::scale_filter`] computes): `info`'s
/// size is the displayed one, so a portrait source gets a portrait size.
fn scaled(info: &MediaInfo, short_side: i32) -> (i32, i32) {
    let even = |x: f64| ((x / 2.0).round() as i32 * 2).max(2);
    let even_down = |x: i32| (x / 2 * 2).max(2);
    if info.width >= info.height {
        let h = short_side.min(even_down(info.height));
        (
            even(f64::from(info.width) * f64::from(h) / f64::from(info.height)),
            h,
        )
    } else {
        let w = short_side.min(even_down(info.width));
        (
            w,
            even(f64::from(info.height) * f64::from(w) / f64::from(info.width)),
        )
    }
}

/// Input options every FFmpeg call on an original takes: local files only, accepted
/// demuxers only, and a cap on the frame size the decoder may allocate.
pub(super) fn hardened_input(
    config: &MediaConfig,
    input: &Path,
    seek_seconds: Option<f64>,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |s: &str| args.push(s.into());
    push("-nostdin");
    push("-hide_banner");
    push("-loglevel");
    push("error");
    push("-y");
    push("-protocol_whitelist");
    push(PROTOCOL_ALLOW_LIST);
    push("-format_whitelist");
    push(DEMUXER_ALLOW_LIST);
    push("-max_pixels");
    push(&config.limits.max_pixels().to_string());
    if let Some(seconds) = seek_seconds {
        push("-ss");
        push(&format!("{seconds:.3}"));
    }
    push("-i");
    args.push(input.into());
    args
}

/// The grid a whole encode puts a source with `timeline` on: the timeline's, where it shows
/// the source faithfully; `None` (off the grid, or no timeline) keeps the source's own timing,
/// every frame at its time (docs/architecture.md, "One frame rate for both paths").
fn grid(timeline: Option<&Timeline>) -> Option<&Timeline> {
    timeline.filter(|line| line.faithful())
}

/// The encode's one command line: the hardened input decoded once, put on the [`grid`] of
/// `timeline` (the source's, as the timing probe measured it), a `split` filter feeding one
/// scale per rung, then per rung its outputs: that rung's video and the audio,
/// the encoders (`video_encoding`, `audio_encoding`), and the tee muxer writing the rung's
/// `tee_outputs`. One decode serves the whole ladder.
pub fn encode_args(
    config: &MediaConfig,
    info: &MediaInfo,
    timeline: Option<&Timeline>,
    input: &Path,
    out: &Path,
    rungs: &[Rung],
) -> Vec<OsString> {
    let segment = config.segment_seconds.max(1);
    let timeline = grid(timeline);
    let mut args = hardened_input(config, input, None);
    if timeline.is_some() {
        // The source's own clock: the graph and the audio filter measure from the origin.
        let at_input = args.len() - 2;
        args.insert(at_input, "-copyts".into());
    }
    args.push("-filter_complex".into());
    args.push(ladder_graph(timeline, rungs).into());
    for (n, rung) in rungs.iter().enumerate() {
        let mut output: Vec<String> = ["-map".to_owned(), format!("[v{n}]")].to_vec();
        output.extend(
            [
                "-map",
                "0:a:0?",
                "-map_metadata",
                "-1",
                "-map_chapters",
                "-1",
            ]
            .map(str::to_owned),
        );
        match timeline {
            Some(line) if info.has_audio() => output.extend([
                "-af".to_owned(),
                audio_filter(line.origin_secs, audio_samples(line)),
            ]),
            Some(_) => {}
            None => output.extend(["-fps_mode".to_owned(), "vfr".to_owned()]),
        }
        output.extend(video_encoding(info, segment));
        output.extend(audio_encoding());
        // Both outputs of the tee share the encoders, so the codec headers must be global.
        output.extend([
            "-flags".to_owned(),
            "+global_header".to_owned(),
            "-threads".to_owned(),
            config.threads.to_string(),
            "-f".to_owned(),
            "tee".to_owned(),
            tee_outputs(out, rung, segment),
        ]);
        args.extend(output.into_iter().map(OsString::from));
    }
    args
}

/// Samples of sound a whole encode on `timeline` writes: all of the source's, or the video's
/// length where that is longer.
fn audio_samples(timeline: &Timeline) -> i64 {
    (timeline.duration_secs() * AUDIO_RATE as f64).round() as i64
}

/// The ladder's filter graph: the first video stream on `timeline`'s grid (exactly its
/// frames, the first held back to the origin), split into one branch per rung, each scaled by
/// [`scale_filter`], labelled `[v0]`, `[v1]`...
fn ladder_graph(timeline: Option<&Timeline>, rungs: &[Rung]) -> String {
    let scale = |side: i32| format!("{},format=yuv420p", scale_filter(side));
    let source = match timeline {
        Some(line) => format!(
            "[0:v:0]{},trim=end_pts={},",
            grid_filter(line.rate, line.origin_secs, true, line.hold_secs),
            line.frames
        ),
        None => "[0:v:0]".to_owned(),
    };
    if let [rung] = rungs {
        return format!("{source}{}[v0]", scale(rung.short_side));
    }
    let mut graph = format!("{source}split={}", rungs.len());
    for n in 0..rungs.len() {
        graph.push_str(&format!("[s{n}]"));
    }
    for (n, rung) in rungs.iter().enumerate() {
        graph.push_str(&format!(";[s{n}]{}[v{n}]", scale(rung.short_side)));
    }
    graph
}

/// The first video stream and the first audio stream if there is one; no metadata,
/// chapters, subtitles or data streams reach the outputs.
pub(super) fn stream_selection() -> Vec<String> {
    [
        "-map",
        "0:v:0",
        "-map",
        "0:a:0?",
        "-map_metadata",
        "-1",
        "-map_chapters",
        "-1",
        "-sn",
        "-dn",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// H.264 high/yuv420p CRF 23 veryfast, with a keyframe on every segment boundary (fixed GOP,
/// no scene-cut keyframes) so each HLS segment starts with one.
fn video_encoding(info: &MediaInfo, segment: u32) -> Vec<String> {
    let gop = if info.fps > 0.0 {
        ((info.fps * f64::from(segment)).round() as i64).max(1)
    } else {
        250
    };
    vec![
        "-c:v".to_owned(),
        "libx264".to_owned(),
        "-preset".to_owned(),
        "veryfast".to_owned(),
        "-crf".to_owned(),
        "23".to_owned(),
        "-profile:v".to_owned(),
        "high".to_owned(),
        "-pix_fmt".to_owned(),
        "yuv420p".to_owned(),
        "-g".to_owned(),
        gop.to_string(),
        "-keyint_min".to_owned(),
        gop.to_string(),
        "-sc_threshold".to_owned(),
        "0".to_owned(),
        "-force_key_frames".to_owned(),
        format!("expr:gte(t,n_forced*{segment})"),
    ]
}

/// AAC stereo 128 kb/s at 48 kHz.
fn audio_encoding() -> Vec<String> {
    ["-c:a", "aac", "-b:a", "128k", "-ac", "2", "-ar", "48000"]
        .map(str::to_owned)
        .to_vec()
}

/// The tee muxer's output list: the rung's HLS rendition (fMP4 segments, VOD playlist) and,
/// for the top rung, the progressive MP4 with `moov` first.
pub(super) fn tee_outputs(out: &Path, rung: &Rung, segment: u32) -> String {
    let hls_dir = out.join("hls").join(&rung.prefix);
    let mut tee = format!(
        "[f=hls:hls_time={segment}:hls_playlist_type=vod:hls_segment_type=fmp4:hls_fmp4_init_filename=init.mp4:\
         hls_segment_filename={seg}:hls_flags=independent_segments]{playlist}",
        seg = tee_escape(&hls_dir.join("seg_%05d.m4s")),
        playlist = tee_escape(&hls_dir.join("index.m3u8")),
    );
    if rung.with_mp4 {
        tee.push_str(&format!(
            "|[f=mp4:movflags=+faststart]{}",
            tee_escape(&out.join(outputs::MP4))
        ));
    }
    tee
}

/// Escapes a path for the tee muxer's output list.
fn tee_escape(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, '\\' | ':' | '|' | '[' | ']' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The timeline of `input` as the timing probe measures it (its listing written under
/// `scratch`); `None` where it has none (no frame rate, no packet times).
pub async fn measured_timeline(
    config: &MediaConfig,
    input: &Path,
    scratch: &Path,
    cancel: &CancellationToken,
) -> Result<Option<Timeline>, MediaError> {
    let timing = super::split::timing(config, input, scratch, cancel).await?;
    Ok(crate::domain::timeline::timeline(&timing, config.max_fps).ok())
}

/// Encodes `input`, whose measured timeline is `timeline`, into `out` (which must be empty) on
/// its [`grid`]: every rung, the thumbnail, and the master playlist when there is more than
/// one rung.
pub async fn encode(
    config: &MediaConfig,
    info: &MediaInfo,
    timeline: Option<&Timeline>,
    input: &Path,
    out: &Path,
    cancel: &CancellationToken,
) -> Result<EncodedFiles, MediaError> {
    let io = |e: std::io::Error| {
        MediaError::retryable(
            crate::domain::failure::FailureCode::IoError,
            format!("local disk: {e}"),
        )
    };
    let rungs = rungs(config, info);
    for rung in &rungs {
        let dir = out.join("hls").join(&rung.prefix);
        tokio::fs::create_dir_all(&dir).await.map_err(io)?;
    }
    process::run(
        &config.ffmpeg,
        &encode_args(config, info, timeline, input, out, &rungs),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify_encode(err, input))?;
    let mut renditions = Vec::with_capacity(rungs.len());
    for rung in &rungs {
        let dir = out.join("hls").join(&rung.prefix);
        let (width, height) = scaled(info, rung.short_side);
        renditions.push(collect(&dir, &rung.prefix, width, height).await?);
    }
    let at = super::thumbnail::thumbnail_secs(info, timeline);
    let thumbnail =
        super::thumbnail::thumbnail(config, at, &out.join(outputs::MP4), out, cancel).await?;
    let playlist = out.join(outputs::PLAYLIST);
    if renditions.len() > 1 {
        let master = master_playlist(&renditions, info.duration_ms)
            .await
            .map_err(io)?;
        tokio::fs::write(&playlist, master).await.map_err(io)?;
    }
    let files = EncodedFiles {
        dir: out.to_owned(),
        playlist,
        renditions,
        mp4: out.join(outputs::MP4),
        thumbnail,
    };
    for path in [&files.mp4, &files.playlist] {
        if !tokio::fs::try_exists(path).await.unwrap_or(false) {
            return Err(missing(
                &path.file_name().unwrap_or_default().to_string_lossy(),
            ));
        }
    }
    Ok(files)
}

/// The master playlist of a ladder: each rendition with its average bandwidth and size.
pub(super) async fn master_playlist(
    renditions: &[Rendition],
    duration_ms: i64,
) -> std::io::Result<String> {
    let seconds = (duration_ms as f64 / 1000.0).max(0.001);
    let mut text = String::from("#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-INDEPENDENT-SEGMENTS\n");
    for r in renditions {
        let mut bytes = tokio::fs::metadata(&r.init).await?.len();
        for segment in &r.segments {
            bytes += tokio::fs::metadata(segment).await?.len();
        }
        let bandwidth = (bytes as f64 * 8.0 / seconds).ceil() as u64;
        text.push_str(&format!(
            "#EXT-X-STREAM-INF:BANDWIDTH={bandwidth},AVERAGE-BANDWIDTH={bandwidth},RESOLUTION={}x{}\n{}index.m3u8\n",
            r.width, r.height, r.prefix
        ));
    }
    Ok(text)
}

pub(super) fn missing(what: &str) -> MediaError {
    MediaError::retryable(
        crate::domain::failure::FailureCode::EncodeFailed,
        format!("the encoder wrote no {what}"),
    )
}

/// An encode that fails on a file the probe accepted is usually the node (disk, memory, a
/// kill), so it is retried; the three attempts bound the cost of a file that is corrupt
/// past its headers.
pub(super) fn classify_encode(err: process::ProcessError, input: &Path) -> MediaError {
    match classify(
        err,
        input,
        crate::domain::failure::FailureCode::EncodeTimeout,
    ) {
        MediaError {
            code: crate::domain::failure::FailureCode::InvalidMedia,
            message,
            ..
        } => MediaError::retryable(crate::domain::failure::FailureCode::EncodeFailed, message),
        other => other,
    }
}

/// Reads the media playlist FFmpeg wrote in `dir` and checks that everything it references
/// exists.
pub(super) async fn collect(
    dir: &Path,
    prefix: &str,
    width: i32,
    height: i32,
) -> Result<Rendition, MediaError> {
    let playlist = dir.join("index.m3u8");
    let text = tokio::fs::read_to_string(&playlist)
        .await
        .map_err(|_| missing("playlist"))?;
    let segments: Vec<PathBuf> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|name| dir.join(name))
        .collect();
    if segments.is_empty() {
        return Err(missing("segment"));
    }
    let rendition = Rendition {
        prefix: prefix.to_owned(),
        width,
        height,
        init: dir.join("init.mp4"),
        segments,
        playlist,
    };
    for path in std::iter::once(&rendition.init).chain(&rendition.segments) {
        if !tokio::fs::try_exists(path).await.unwrap_or(false) {
            return Err(missing(
                &path.file_name().unwrap_or_default().to_string_lossy(),
            ));
        }
    }
    Ok(rendition)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::timeline::Rate;

    fn info() -> MediaInfo {
        MediaInfo {
            container: "mov,mp4,m4a,3gp,3g2,mj2".into(),
            duration_ms: 10_000,
            video_codec: "h264".into(),
            width: 1920,
            height: 1080,
            fps: 25.0,
            audio_codec: Some("aac".into()),
        }
    }

    fn line(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The whole command line of one rung and of a ladder, as FFmpeg receives it (the parts
    /// are built separately; their order and content must not drift).
    #[test]
    fn an_encode_command_line_is_input_one_decode_then_each_rungs_encoders_and_tee_outputs() {
        let config = MediaConfig::default();
        let rung = |short_side: i32, prefix: &str, with_mp4: bool| Rung {
            short_side,
            prefix: prefix.into(),
            with_mp4,
        };
        let timeline = Timeline {
            rate: Rate { num: 25, den: 1 },
            origin_secs: 1.5,
            frames: 250,
            hold_secs: 0.0,
            audio_secs: 10.5,
            off_grid: 0.0,
            capped: false,
        };
        let run = |timeline: Option<&Timeline>, rungs: &[Rung]| {
            line(&encode_args(
                &config,
                &info(),
                timeline,
                Path::new("/in/orig"),
                Path::new("/out"),
                rungs,
            ))
        };
        assert_eq!(run(Some(&timeline), &[rung(720, "", true)]), ONE);
        assert_eq!(
            run(None, &[rung(720, "v0/", true), rung(360, "v1/", false)]),
            LADDER
        );
    }

    const ONE: &str = r#"-nostdin -hide_banner -loglevel error -y -protocol_whitelist file -format_whitelist mov,mp4,m4a,3gp,3g2,mj2,matroska,webm -max_pixels 8294400 -copyts -i /in/orig -filter_complex [0:v:0]setpts=PTS-1.500000/TB,fps=25/1:start_time=0,tpad=stop_mode=clone:stop_duration=2.000,trim=end_pts=250,scale=w='if(gte(iw,ih),-2,min(720,trunc(iw/2)*2))':h='if(gte(iw,ih),min(720,trunc(ih/2)*2),-2)',format=yuv420p[v0] -map [v0] -map 0:a:0? -map_metadata -1 -map_chapters -1 -af asetpts=PTS-1.500000/TB,aresample=48000:async=1:first_pts=0,aformat=sample_fmts=fltp:sample_rates=48000:channel_layouts=stereo,apad=whole_len=504000,atrim=end_sample=504000 -c:v libx264 -preset veryfast -crf 23 -profile:v high -pix_fmt yuv420p -g 100 -keyint_min 100 -sc_threshold 0 -force_key_frames expr:gte(t,n_forced*4) -c:a aac -b:a 128k -ac 2 -ar 48000 -flags +global_header -threads 0 -f tee [f=hls:hls_time=4:hls_playlist_type=vod:hls_segment_type=fmp4:hls_fmp4_init_filename=init.mp4:hls_segment_filename=/out/hls/seg_%05d.m4s:hls_flags=independent_segments]/out/hls/index.m3u8|[f=mp4:movflags=+faststart]/out/video.mp4"#;
    const LADDER: &str = r#"-nostdin -hide_banner -loglevel error -y -protocol_whitelist file -format_whitelist mov,mp4,m4a,3gp,3g2,mj2,matroska,webm -max_pixels 8294400 -i /in/orig -filter_complex [0:v:0]split=2[s0][s1];[s0]scale=w='if(gte(iw,ih),-2,min(720,trunc(iw/2)*2))':h='if(gte(iw,ih),min(720,trunc(ih/2)*2),-2)',format=yuv420p[v0];[s1]scale=w='if(gte(iw,ih),-2,min(360,trunc(iw/2)*2))':h='if(gte(iw,ih),min(360,trunc(ih/2)*2),-2)',format=yuv420p[v1] -map [v0] -map 0:a:0? -map_metadata -1 -map_chapters -1 -fps_mode vfr -c:v libx264 -preset veryfast -crf 23 -profile:v high -pix_fmt yuv420p -g 100 -keyint_min 100 -sc_threshold 0 -force_key_frames expr:gte(t,n_forced*4) -c:a aac -b:a 128k -ac 2 -ar 48000 -flags +global_header -threads 0 -f tee [f=hls:hls_time=4:hls_playlist_type=vod:hls_segment_type=fmp4:hls_fmp4_init_filename=init.mp4:hls_segment_filename=/out/hls/v0/seg_%05d.m4s:hls_flags=independent_segments]/out/hls/v0/index.m3u8|[f=mp4:movflags=+faststart]/out/video.mp4 -map [v1] -map 0:a:0? -map_metadata -1 -map_chapters -1 -fps_mode vfr -c:v libx264 -preset veryfast -crf 23 -profile:v high -pix_fmt yuv420p -g 100 -keyint_min 100 -sc_threshold 0 -force_key_frames expr:gte(t,n_forced*4) -c:a aac -b:a 128k -ac 2 -ar 48000 -flags +global_header -threads 0 -f tee [f=hls:hls_time=4:hls_playlist_type=vod:hls_segment_type=fmp4:hls_fmp4_init_filename=init.mp4:hls_segment_filename=/out/hls/v1/seg_%05d.m4s:hls_flags=independent_segments]/out/hls/v1/index.m3u8"#;
}
