//! The timing probe of a source about to be split: its first video stream's rates, start,
//! rotation and the end of its last frame, from one demux pass (nothing decoded).

use std::ffi::OsString;
use std::path::Path;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::super::probe::classify;
use super::super::{MediaConfig, PROTOCOL_ALLOW_LIST, process};
use super::io;
use crate::domain::failure::FailureCode;
use crate::domain::media::MediaError;
use crate::domain::split::{Rate, StreamTiming};

/// ffprobe's view of the first video stream's timing: rates, start, rotation, and each
/// packet's time (written to `listing`, a scratch file: a long video's list is megabytes).
pub fn timing_args(input: &Path, listing: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = [
        "-v",
        "error",
        "-hide_banner",
        "-protocol_whitelist",
        PROTOCOL_ALLOW_LIST,
        "-format_whitelist",
        super::super::DEMUXER_ALLOW_LIST,
        "-select_streams",
        "v:0",
        "-show_entries",
        "stream=r_frame_rate,avg_frame_rate,start_time:stream_side_data=rotation:packet=pts_time,duration_time",
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
    pts_time: Option<String>,
    duration_time: Option<String>,
}

#[derive(Deserialize)]
struct TimingStream {
    r_frame_rate: Option<String>,
    avg_frame_rate: Option<String>,
    start_time: Option<String>,
    #[serde(default)]
    side_data_list: Vec<SideData>,
}

#[derive(Deserialize)]
struct SideData {
    rotation: Option<f64>,
}

/// Reads the timing of `input`'s first video stream (one demux pass, nothing decoded).
pub async fn timing(
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

/// Parses [`timing_args`]' output.
pub fn parse_timing(json: &[u8]) -> Result<StreamTiming, MediaError> {
    let probe: TimingProbe = serde_json::from_slice(json).map_err(|e| {
        MediaError::permanent(
            FailureCode::InvalidMedia,
            format!("unreadable timing probe: {e}"),
        )
    })?;
    let stream = probe.streams.first().ok_or_else(|| {
        MediaError::permanent(FailureCode::NoVideoStream, "the file has no video stream")
    })?;
    let number = |s: &Option<String>| s.as_deref().and_then(|s| s.parse::<f64>().ok());
    let start_secs = number(&stream.start_time)
        .filter(|s| s.is_finite())
        .unwrap_or(0.0);
    let end_secs = probe
        .packets
        .iter()
        .filter_map(|p| Some(number(&p.pts_time)? + number(&p.duration_time).unwrap_or(0.0)))
        .filter(|end| end.is_finite())
        .fold(None, |most: Option<f64>, end| {
            Some(most.map_or(end, |m| m.max(end)))
        });
    let rotation = stream
        .side_data_list
        .iter()
        .find_map(|d| d.rotation)
        .map_or(0, |r| r.round() as i32);
    Ok(StreamTiming {
        base_rate: stream.r_frame_rate.as_deref().and_then(Rate::parse),
        average_rate: stream.avg_frame_rate.as_deref().and_then(Rate::parse),
        start_secs,
        end_secs,
        rotation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timing_probe_finds_the_grid_and_the_rotation() {
        let json = br#"{"packets":[{"pts_time":"0.000000","duration_time":"0.033333"},
            {"pts_time":"0.100000","duration_time":"0.033333"},{"pts_time":"0.033333","duration_time":"0.033333"}],
            "streams":[{"r_frame_rate":"30/1","avg_frame_rate":"30/1","start_time":"0.000000",
            "side_data_list":[{"rotation":-90}]}]}"#;
        let timing = parse_timing(json).unwrap();
        assert_eq!(timing.base_rate, Some(Rate { num: 30, den: 1 }));
        assert_eq!(timing.rotation, -90);
        assert!((timing.end_secs.unwrap() - 0.133333).abs() < 1e-6);
    }
}
