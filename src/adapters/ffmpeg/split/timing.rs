//! The timing probe of a source about to be encoded: its first video stream's rates, rotation,
//! every frame's time and which are keyframes, and the first audio stream's span, from one
//! demux pass; then its last GOP decoded, to find where its frames really end. Both encode paths put the source on
//! the [`crate::domain::timeline::Timeline`] made from it.

use std::ffi::OsString;
use std::path::Path;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::super::probe::{SideData, classify, rotation_of};
use super::super::{MediaConfig, PROTOCOL_ALLOW_LIST, process};
use super::io;
use crate::domain::failure::FailureCode;
use crate::domain::media::MediaError;
use crate::domain::split::{Rate, StreamTiming};

/// ffprobe's view of the streams' timing: rates, rotation, and each packet's stream, time,
/// duration and keyframe flag (written to `listing`, a scratch file: a
/// long video's list is megabytes).
pub fn timing_args(input: &Path, listing: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-v",
        "error",
        "-hide_banner",
        "-protocol_whitelist",
        PROTOCOL_ALLOW_LIST,
        "-format_whitelist",
        super::super::DEMUXER_ALLOW_LIST,
        "-show_entries",
        "stream=index,codec_type,r_frame_rate,avg_frame_rate:\
         stream_disposition=attached_pic:stream_side_data=rotation:\
         packet=stream_index,pts_time,duration_time,flags",
        "-of",
        "json=c=1",
        "-o",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.push(listing.into());
    args.push(input.into());
    args
}

#[derive(Deserialize)]
struct TimingProbe {
    #[serde(default)]
    packets: Vec<PacketTime>,
    #[serde(default)]
    streams: Vec<TimingStream>,
}

#[derive(Deserialize)]
struct PacketTime {
    stream_index: Option<i64>,
    pts_time: Option<String>,
    duration_time: Option<String>,
    #[serde(default)]
    flags: String,
}

#[derive(Deserialize)]
struct TimingStream {
    index: i64,
    codec_type: Option<String>,
    r_frame_rate: Option<String>,
    avg_frame_rate: Option<String>,
    #[serde(default)]
    disposition: Disposition,
    #[serde(default)]
    side_data_list: Vec<SideData>,
}

#[derive(Deserialize, Default)]
struct Disposition {
    #[serde(default)]
    attached_pic: i32,
}

/// How far before its last packet a source's tail is decoded to find where its frames end;
/// four times as far each time nothing in the window decodes.
const TAIL_SECS: f64 = 10.0;

/// Reads the timing of `input` (one demux pass), then decodes its tail: a stream that stops
/// decoding early ends there, on both encode paths, as a decoder plays it.
pub async fn timing(
    config: &MediaConfig,
    input: &Path,
    scratch: &Path,
    cancel: &CancellationToken,
) -> Result<StreamTiming, MediaError> {
    let mut timing = packet_timing(config, input, scratch, cancel).await?;
    end_at_decodable(config, input, &mut timing, cancel).await?;
    Ok(timing)
}

/// Cuts `timing` at its last frame that decodes: its last GOP is decoded (nothing else is,
/// for a source that decodes to its end), and if none of it decodes, the tail from the
/// keyframe [`TAIL_SECS`] before the last packet, then further back while nothing in it
/// decodes. A source none of whose frames decode is left as its packets say: its encode
/// fails on it as it would have.
async fn end_at_decodable(
    config: &MediaConfig,
    input: &Path,
    timing: &mut StreamTiming,
    cancel: &CancellationToken,
) -> Result<(), MediaError> {
    let (Some(&first), Some(&last)) = (timing.frame_times.first(), timing.frame_times.last())
    else {
        return Ok(());
    };
    let mut window = 0.0;
    loop {
        let at = timing
            .keyframe_times
            .iter()
            .rev()
            .find(|&&k| k <= last - window)
            .copied()
            .unwrap_or(first);
        let decoded = decoded_times(config, input, at, cancel).await?;
        if let Some(end) = decoded.into_iter().reduce(f64::max) {
            if end < last - 1e-6 {
                tracing::warn!(
                    last_packet = last,
                    last_frame = end,
                    "the video stops decoding before its last packet; it ends at its last frame"
                );
                cut_at(timing, end);
            }
            return Ok(());
        }
        if at <= first {
            return Ok(());
        }
        window = if window == 0.0 {
            TAIL_SECS
        } else {
            window * 4.0
        };
    }
}

/// Drops every frame after `end` from `timing`; the last one lasts as long as the one before it.
fn cut_at(timing: &mut StreamTiming, end: f64) {
    timing.frame_times.retain(|&t| t <= end + 1e-9);
    timing.keyframe_times.retain(|&t| t <= end + 1e-9);
    let step = match timing.frame_times.as_slice() {
        [.., before, last] => last - before,
        _ => 0.0,
    };
    timing.end_secs = Some(end + step);
}

/// The times of the frames of the first video stream that decode from `from` (a time on
/// the source's clock) to the end.
async fn decoded_times(
    config: &MediaConfig,
    input: &Path,
    from: f64,
    cancel: &CancellationToken,
) -> Result<Vec<f64>, MediaError> {
    let mut args: Vec<OsString> = [
        "-v",
        "quiet",
        "-hide_banner",
        "-protocol_whitelist",
        PROTOCOL_ALLOW_LIST,
        "-format_whitelist",
        super::super::DEMUXER_ALLOW_LIST,
        "-select_streams",
        "v:0",
        "-read_intervals",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    args.push(format!("{from:.6}%").into());
    args.extend(
        [
            "-show_entries",
            "frame=best_effort_timestamp_time",
            "-of",
            "csv=p=0",
        ]
        .iter()
        .map(OsString::from),
    );
    args.push(input.into());
    let out = process::run(&config.ffprobe, &args, config.call_timeout, cancel)
        .await
        .map_err(|err| classify(err, input, FailureCode::ProbeTimeout))?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|line| line.trim().trim_end_matches(',').parse::<f64>().ok())
        .collect())
}

/// Reads the packets' timing of `input` (one demux pass, nothing decoded).
async fn packet_timing(
    config: &MediaConfig,
    input: &Path,
    scratch: &Path,
    cancel: &CancellationToken,
) -> Result<StreamTiming, MediaError> {
    let listing = scratch.join("timing.json");
    process::run(
        &config.ffprobe,
        &timing_args(input, &listing),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify(err, input, FailureCode::ProbeTimeout))?;
    let json = tokio::fs::read(&listing)
        .await
        .map_err(io("reading the timing probe"))?;
    let _ = tokio::fs::remove_file(&listing).await;
    parse_timing(&json)
}

/// Parses [`timing_args`]' output. The video is the first video stream that is not cover
/// art (as the encode maps it); the audio, the first audio stream.
pub fn parse_timing(json: &[u8]) -> Result<StreamTiming, MediaError> {
    let probe: TimingProbe = serde_json::from_slice(json).map_err(|e| {
        MediaError::permanent(
            FailureCode::InvalidMedia,
            format!("unreadable timing probe: {e}"),
        )
    })?;
    let kind = |s: &&TimingStream, kind: &str| s.codec_type.as_deref() == Some(kind);
    let video = probe
        .streams
        .iter()
        .find(|s| kind(s, "video") && s.disposition.attached_pic == 0)
        .ok_or_else(|| {
            MediaError::permanent(FailureCode::NoVideoStream, "the file has no video stream")
        })?;
    let audio = probe.streams.iter().find(|s| kind(s, "audio"));
    let number = |s: &Option<String>| {
        s.as_deref()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|n| n.is_finite())
    };
    // (time, end, key) of each packet of stream `index` that has a time and is shown (not an
    // encoder's priming, flagged `D`: the decoder drops it).
    let packets = |index: i64| -> Vec<(f64, f64, bool)> {
        probe
            .packets
            .iter()
            .filter(|p| p.stream_index == Some(index) && !p.flags.contains('D'))
            .filter_map(|p| {
                let pts = number(&p.pts_time)?;
                Some((
                    pts,
                    pts + number(&p.duration_time).unwrap_or(0.0),
                    p.flags.contains('K'),
                ))
            })
            .collect()
    };
    let shown = packets(video.index);
    let times = |keys_only: bool| {
        let mut times: Vec<f64> = shown
            .iter()
            .filter(|(_, _, key)| *key || !keys_only)
            .map(|(t, _, _)| *t)
            .collect();
        times.sort_by(f64::total_cmp);
        times.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
        times
    };
    let end_secs = shown.iter().map(|(_, end, _)| *end).reduce(f64::max);
    let audio_span = audio.and_then(|a| {
        let heard = packets(a.index);
        let start = heard.iter().map(|(t, _, _)| *t).reduce(f64::min)?;
        let end = heard.iter().map(|(_, end, _)| *end).reduce(f64::max)?;
        Some((start, end))
    });
    let rotation = rotation_of(&video.side_data_list).map_or(0, |r| r.round() as i32);
    Ok(StreamTiming {
        base_rate: video.r_frame_rate.as_deref().and_then(Rate::parse),
        average_rate: video.avg_frame_rate.as_deref().and_then(Rate::parse),
        frame_times: times(false),
        keyframe_times: times(true),
        end_secs,
        rotation,
        audio_span,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timing_probe_finds_the_grid_and_the_rotation() {
        let json = br#"{"packets":[
            {"stream_index":1,"pts_time":"0.000000","duration_time":"0.033333","flags":"K__"},
            {"stream_index":0,"pts_time":"0.978667","duration_time":"0.021333","flags":"KD_"},
            {"stream_index":0,"pts_time":"1.000000","duration_time":"0.021333","flags":"K__"},
            {"stream_index":1,"pts_time":"0.100000","duration_time":"0.033333","flags":"___"},
            {"stream_index":0,"pts_time":"9.000000","duration_time":"0.021333","flags":"K__"},
            {"stream_index":1,"pts_time":"0.033333","duration_time":"0.033333","flags":"K__"}],
            "streams":[{"index":0,"codec_type":"audio"},
            {"index":1,"codec_type":"video","r_frame_rate":"30/1","avg_frame_rate":"30/1",
             "side_data_list":[{"rotation":-90}]}]}"#;
        let timing = parse_timing(json).unwrap();
        assert_eq!(timing.base_rate, Some(Rate { num: 30, den: 1 }));
        assert_eq!(timing.rotation, -90);
        assert!((timing.end_secs.unwrap() - 0.133333).abs() < 1e-6);
        assert_eq!(timing.frame_times, [0.0, 0.033333, 0.1]);
        assert_eq!(timing.keyframe_times, [0.0, 0.033333]);
        let (start, end) = timing.audio_span.unwrap();
        assert!((start - 1.0).abs() < 1e-9 && (end - 9.021333).abs() < 1e-9);
    }
}
