//! Output objects ("artifacts") and their axes. Each axis is confirmed on its own, so a
//! stored MP4 can never hide a missing segment.

/// What an output object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// The client's upload.
    Original,
    /// fMP4 initialization segment (`EXT-X-MAP`).
    Init,
    /// One media segment.
    Segment,
    /// The HLS playlist; uploaded last.
    Playlist,
    /// Poster frame.
    Thumbnail,
    /// Progressive MP4.
    Mp4,
}

impl Axis {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Original => "original",
            Self::Init => "init",
            Self::Segment => "segment",
            Self::Playlist => "playlist",
            Self::Thumbnail => "thumbnail",
            Self::Mp4 => "mp4",
        }
    }

    /// The `Content-Type` the object is stored with.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Original | Self::Init | Self::Mp4 => "video/mp4",
            Self::Segment => "video/iso.segment",
            Self::Playlist => "application/vnd.apple.mpegurl",
            Self::Thumbnail => "image/jpeg",
        }
    }
}
