//! Output objects ("artifacts") and their axes. Each axis is confirmed on its own, so a
//! stored MP4 can never hide a missing segment.

/// What an output object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
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
            Self::Init | Self::Mp4 => "video/mp4",
            Self::Segment => "video/iso.segment",
            Self::Playlist => "application/vnd.apple.mpegurl",
            Self::Thumbnail => "image/jpeg",
        }
    }
}

/// Where an output object is in the ledger: registered before its PUT, then confirmed by a
/// compare-and-set on state and the size S3 reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArtifactState {
    /// Registered; the object may be missing or partial.
    Pending,
    /// S3 holds it with the registered size.
    Uploaded,
}

impl ArtifactState {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Uploaded => "uploaded",
        }
    }
}
