//! Output objects ("artifacts") and their axes. Each axis is confirmed on its own, so a
//! stored MP4 can never hide a missing segment.

spelled_states! {
    /// What an output object is.
    pub enum Axis {
        /// A live recording's files joined into one MP4 by its repackage attempt.
        Original = "original",
        /// fMP4 initialization segment (`EXT-X-MAP`).
        Init = "init",
        /// One media segment.
        Segment = "segment",
        /// The HLS playlist; uploaded last.
        Playlist = "playlist",
        /// Poster frame.
        Thumbnail = "thumbnail",
        /// Progressive MP4.
        Mp4 = "mp4",
        /// One rendition of a split video's chunk: video-only MPEG-TS, an intermediate the
        /// stitch reads (removed once the video is READY).
        Chunk = "chunk",
        /// A split video's whole audio track: an intermediate the stitch reads.
        Audio = "audio",
    }
}

impl Axis {
    /// The `Content-Type` the object is stored with.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Original | Self::Init | Self::Mp4 => "video/mp4",
            Self::Segment => "video/iso.segment",
            Self::Playlist => "application/vnd.apple.mpegurl",
            Self::Thumbnail => "image/jpeg",
            Self::Chunk | Self::Audio => "video/mp2t",
        }
    }
}

spelled_states! {
    /// Where an output object is in the ledger: registered before its PUT, then confirmed by
    /// a compare-and-set on state and the size S3 reports.
    pub enum ArtifactState {
        /// Registered; the object may be missing or partial.
        Pending = "pending",
        /// S3 holds it with the registered size.
        Uploaded = "uploaded",
    }
}
