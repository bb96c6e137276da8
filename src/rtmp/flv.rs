//! FLV, the container RTMP's media messages come from and FFmpeg's `-f flv` reads: the file
//! header, one tag per audio or video message, and the codec each message names. vidq takes
//! H.264 video and AAC audio (what every RTMP encoder sends by default); anything else is
//! refused by name before FFmpeg sees it.

/// An audio tag.
pub const TAG_AUDIO: u8 = 8;
/// A video tag.
pub const TAG_VIDEO: u8 = 9;

/// The FLV codec id of H.264 (AVC) video.
pub const VIDEO_AVC: u32 = 7;
/// The FLV sound format of AAC audio.
pub const AUDIO_AAC: u32 = 10;

/// The file header followed by the first "previous tag size" (0): what a reader needs before
/// the first tag. The flags say which kinds of tags follow, so FFmpeg waits for both.
pub fn header(audio: bool, video: bool) -> [u8; 13] {
    let flags = (u8::from(audio) << 2) | u8::from(video);
    [b'F', b'L', b'V', 1, flags, 0, 0, 0, 9, 0, 0, 0, 0]
}

/// One tag: its 11-byte head, the message's bytes, and the size of both that follows every
/// tag. `timestamp_ms` is the message's decode time (the upper 8 bits go in the extension).
pub fn tag(kind: u8, timestamp_ms: u32, data: &[u8]) -> Vec<u8> {
    let size = data.len() as u32;
    let mut out = Vec::with_capacity(data.len() + 15);
    out.push(kind);
    out.extend_from_slice(&size.to_be_bytes()[1..]);
    out.extend_from_slice(&timestamp_ms.to_be_bytes()[1..]);
    out.push((timestamp_ms >> 24) as u8);
    out.extend_from_slice(&[0, 0, 0]); // stream id, always 0
    out.extend_from_slice(data);
    out.extend_from_slice(&(size + 11).to_be_bytes());
    out
}

/// A codec vidq does not take, named for the log line that refuses the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// Video other than H.264.
    #[error("video codec {0} (vidq takes H.264)")]
    Video(String),
    /// Audio other than AAC.
    #[error("audio codec {0} (vidq takes AAC)")]
    Audio(String),
}

/// The video codec a video message's first byte names: `Ok` for H.264 (and for an empty
/// message, which names none).
pub fn check_video(data: &[u8]) -> Result<(), Unsupported> {
    let Some(&first) = data.first() else {
        return Ok(());
    };
    // Enhanced RTMP (HEVC, AV1, VP9 from newer encoders) sets the top bit and names a FourCC.
    if first & 0x80 != 0 {
        let fourcc = data.get(1..5).map_or_else(
            || "(unnamed)".to_owned(),
            |c| String::from_utf8_lossy(c).into_owned(),
        );
        return Err(Unsupported::Video(format!("{fourcc} (enhanced RTMP)")));
    }
    video_id(u32::from(first & 0x0f))
}

/// The audio codec an audio message's first byte names: `Ok` for AAC.
pub fn check_audio(data: &[u8]) -> Result<(), Unsupported> {
    match data.first() {
        None => Ok(()),
        Some(&first) => audio_id(u32::from(first >> 4)),
    }
}

/// A video codec id, as a message or the stream's metadata (`videocodecid`) gives it.
pub fn video_id(id: u32) -> Result<(), Unsupported> {
    let name = match id {
        VIDEO_AVC => return Ok(()),
        2 => "Sorenson H.263",
        3 => "Screen video",
        4 => "On2 VP6",
        5 => "On2 VP6 with alpha",
        6 => "Screen video 2",
        12 => "HEVC",
        13 => "AV1",
        other => return Err(Unsupported::Video(format!("id {other}"))),
    };
    Err(Unsupported::Video(name.to_owned()))
}

/// An audio codec id (sound format), as a message or the stream's metadata (`audiocodecid`)
/// gives it.
pub fn audio_id(id: u32) -> Result<(), Unsupported> {
    let name = match id {
        AUDIO_AAC => return Ok(()),
        0 | 3 => "PCM",
        1 => "ADPCM",
        2 | 14 => "MP3",
        4..=6 => "Nellymoser",
        7 => "G.711 A-law",
        8 => "G.711 mu-law",
        11 => "Speex",
        13 => "Opus",
        other => return Err(Unsupported::Audio(format!("id {other}"))),
    };
    Err(Unsupported::Audio(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_carries_its_size_and_a_timestamp_past_24_bits() {
        let t = tag(TAG_VIDEO, 0x0123_4567, &[0x17, 0, 0, 0, 0]);
        assert_eq!(t[0], TAG_VIDEO);
        assert_eq!(&t[1..4], &[0, 0, 5]);
        assert_eq!(&t[4..7], &[0x23, 0x45, 0x67]);
        assert_eq!(t[7], 0x01);
        assert_eq!(&t[8..11], &[0, 0, 0]);
        assert_eq!(&t[11..16], &[0x17, 0, 0, 0, 0]);
        assert_eq!(&t[16..], &16u32.to_be_bytes());
        assert_eq!(header(true, true)[4], 5);
        assert_eq!(header(false, true)[4], 1);
    }

    #[test]
    fn h264_and_aac_pass_and_other_codecs_are_named() {
        assert_eq!(check_video(&[0x17, 0x00]), Ok(()));
        assert_eq!(check_video(&[0x27, 0x01]), Ok(()));
        assert_eq!(check_video(&[]), Ok(()));
        assert_eq!(check_audio(&[0xaf, 0x00]), Ok(()));
        assert_eq!(
            check_video(&[0x12]).unwrap_err().to_string(),
            "video codec Sorenson H.263 (vidq takes H.264)"
        );
        assert_eq!(
            check_video(&[0x90, b'h', b'v', b'c', b'1']).unwrap_err(),
            Unsupported::Video("hvc1 (enhanced RTMP)".to_owned())
        );
        assert_eq!(
            check_audio(&[0x2f]).unwrap_err().to_string(),
            "audio codec MP3 (vidq takes AAC)"
        );
        assert!(video_id(12).is_err());
        assert!(audio_id(10).is_ok());
    }
}
