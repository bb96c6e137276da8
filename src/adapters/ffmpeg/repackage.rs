//! A live recording's repackage, without re-encoding: its fMP4 init and segments, joined
//! byte for byte, are one fragmented MP4 that FFmpeg rewrites as a plain MP4 with `moov`
//! first (the recording's original axis); from that, one more call cuts the VOD HLS
//! rendition (stream copy, at the source's keyframes) and the usual call makes the
//! thumbnail.

use std::ffi::OsString;
use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::MediaConfig;
use super::encode::{
    EncodedFiles, Rung, classify_encode, collect, hardened_input, missing, stream_selection,
    tee_outputs,
};
use super::process;
use super::thumbnail::{thumbnail, thumbnail_secs};
use crate::domain::keys::outputs;
use crate::domain::media::{MediaError, MediaInfo};

/// The join's command line: the first video and audio streams of `joined` copied into
/// `original`, `moov` first.
pub fn join_args(config: &MediaConfig, joined: &Path, original: &Path) -> Vec<OsString> {
    let mut args = hardened_input(config, joined, None);
    args.extend(stream_selection().into_iter().map(OsString::from));
    for s in ["-c", "copy", "-movflags", "+faststart", "-f", "mp4"] {
        args.push(s.into());
    }
    args.push(original.into());
    args
}

/// The VOD rendition's command line: `original` copied into fMP4 HLS segments under
/// `out/hls/` with a VOD playlist, the same muxer settings as an encode's rendition.
pub fn vod_args(config: &MediaConfig, original: &Path, out: &Path) -> Vec<OsString> {
    let segment = config.segment_seconds.max(1);
    let mut args = hardened_input(config, original, None);
    args.extend(stream_selection().into_iter().map(OsString::from));
    let rung = Rung {
        short_side: 0,
        prefix: String::new(),
        with_mp4: false,
    };
    for s in ["-c", "copy", "-f", "tee"] {
        args.push(s.into());
    }
    args.push(tee_outputs(out, &rung, segment).into());
    args
}

/// Joins the recording (`joined`: its init and segments, concatenated) into `original`.
pub async fn join(
    config: &MediaConfig,
    joined: &Path,
    original: &Path,
    cancel: &CancellationToken,
) -> Result<(), MediaError> {
    process::run(
        &config.ffmpeg,
        &join_args(config, joined, original),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify_encode(err, joined))?;
    if tokio::fs::metadata(original).await.map_or(0, |m| m.len()) == 0 {
        return Err(missing("joined MP4"));
    }
    Ok(())
}

/// The playable outputs of a recording from its `original` (probed as `info`): one HLS
/// rendition in the source's own size, the original itself as the MP4, and the thumbnail.
pub async fn vod(
    config: &MediaConfig,
    info: &MediaInfo,
    original: &Path,
    out: &Path,
    cancel: &CancellationToken,
) -> Result<EncodedFiles, MediaError> {
    let io = |e: std::io::Error| {
        MediaError::retryable(
            crate::domain::failure::FailureCode::IoError,
            format!("local disk: {e}"),
        )
    };
    let dir = out.join("hls");
    tokio::fs::create_dir_all(&dir).await.map_err(io)?;
    process::run(
        &config.ffmpeg,
        &vod_args(config, original, out),
        config.call_timeout,
        cancel,
    )
    .await
    .map_err(|err| classify_encode(err, original))?;
    let rendition = collect(&dir, "", info.width, info.height).await?;
    let thumbnail = thumbnail(config, thumbnail_secs(info, None), original, out, cancel).await?;
    Ok(EncodedFiles {
        dir: out.to_owned(),
        playlist: out.join(outputs::PLAYLIST),
        renditions: vec![rendition],
        mp4: original.to_owned(),
        thumbnail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Both calls copy the streams (no encoder is named) from a hardened, local-only input.
    #[test]
    fn the_join_and_the_vod_copy_streams_from_a_hardened_input() {
        let config = MediaConfig::default();
        let join = line(&join_args(
            &config,
            Path::new("/s/joined.mp4"),
            Path::new("/s/original.mp4"),
        ));
        assert!(
            join.contains("-protocol_whitelist file -format_whitelist mov,mp4")
                && join.contains("-i /s/joined.mp4 -map 0:v:0 -map 0:a:0?")
                && join.ends_with("-c copy -movflags +faststart -f mp4 /s/original.mp4"),
            "{join}"
        );
        let vod = line(&vod_args(
            &config,
            Path::new("/s/original.mp4"),
            Path::new("/out"),
        ));
        assert!(
            vod.contains(
                "-c copy -f tee [f=hls:hls_time=4:hls_playlist_type=vod:hls_segment_type=fmp4"
            ) && vod.ends_with("]/out/hls/index.m3u8"),
            "{vod}"
        );
        assert!(!vod.contains("libx264") && !join.contains("libx264"));
    }
}
