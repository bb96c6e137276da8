//! Upload contracts: what a client may ask to upload, and the states a contract moves through.
//!
//! `pending -> confirmed` for a presigned PUT checked by HEAD at confirm time; the sweeper
//! moves a presigned contract still `pending` after `expires_at` to `expired` (and deletes
//! its object), so a confirm that comes later answers `409 upload_closed`.
//!
//! An upload through vidq ([`UploadVia::Vidq`]) is `receiving` while its bytes arrive in a
//! node's spool, then `pending`: the ledger row the node's sweeper re-drives until it PUTs
//! the contracted key and confirms (`pending -> confirmed` in the confirm's one
//! transaction), or refuses it for good (`rejected`, with a [`RejectReason`]). `rejected`
//! and `expired` are terminal.

/// Container types the media pipeline accepts (the probe's demuxer allow-list matches).
pub const ACCEPTED_CONTENT_TYPES: &[&str] = &[
    "video/mp4",
    "video/quicktime",
    "video/webm",
    "video/x-matroska",
    "video/3gpp",
    "video/3gpp2",
    "video/x-m4v",
];

spelled_states! {
    /// Where an upload contract is in its life.
    pub enum UploadState {
        /// An upload through vidq whose bytes are still arriving in the node's spool.
        Receiving = "receiving",
        /// Contract issued; the object may or may not be in S3 yet.
        Pending = "pending",
        /// A video and its encoding job exist for it.
        Confirmed = "confirmed",
        /// Refused for good (reason recorded).
        Rejected = "rejected",
        /// Never completed before its deadline.
        Expired = "expired",
    }
}

impl UploadState {
    /// States from which a confirm may turn the contract into a video.
    pub fn confirmable(self) -> bool {
        self == Self::Pending
    }
}

spelled_states! {
    /// How a contract's bytes reach S3.
    pub enum UploadVia {
        /// The client PUTs a presigned URL straight to S3.
        Presigned = "presigned",
        /// The client sends the bytes to vidq (tus or a single PUT); vidq PUTs them from
        /// its spool.
        Vidq = "vidq",
    }
}

spelled_states! {
    /// Where an upload through vidq keeps its bytes while they arrive (`VIDQ_TUS_STORE`).
    pub enum UploadStore {
        /// The node's spool; its sweeper PUTs the file once whole. One node serves the
        /// upload (a load balancer needs affinity); keeps taking bytes while S3 is down.
        Spool = "spool",
        /// An S3 multipart upload on the final key, its parts and offset in the ledger: any
        /// node serves any request, and the upload outlives the node that began it.
        S3 = "s3",
    }
}

spelled_states! {
    /// Why the sweeper refused an upload through vidq for good (shown in the API).
    pub enum RejectReason {
        /// The spool path is absolute, holds `..`, or resolves (through a symlink) outside
        /// `VIDQ_SPOOL_DIR`: never read, never PUT.
        OutsideSpoolRoot = "outside_spool_root",
        /// The spool file is gone (a lost disk, an operator's cleanup): nothing to PUT.
        SpoolMissing = "spool_missing",
        /// The spool file does not have the declared size.
        SpoolSizeMismatch = "spool_size_mismatch",
    }
}

/// A state string the code does not know (the schema's CHECK makes this a bug, not input).
#[derive(Debug, thiserror::Error)]
#[error("unknown state {0:?}")]
pub struct UnknownState(pub String);

/// Why a new upload request was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UploadRequestError {
    /// Empty, too long, or holding control characters.
    #[error("filename must be 1-255 characters, without control characters")]
    BadFilename,
    /// Not one of [`ACCEPTED_CONTENT_TYPES`].
    #[error("content type {0:?} is not an accepted video type (accepted: {accepted})", accepted = ACCEPTED_CONTENT_TYPES.join(", "))]
    UnsupportedMediaType(String),
    /// Zero or negative.
    #[error("size_bytes must be a positive number of bytes")]
    BadSize,
    /// Over the configured limit.
    #[error("size_bytes {declared} is over the limit of {limit} bytes")]
    TooLarge {
        /// What the client declared.
        declared: u64,
        /// `VIDQ_MAX_UPLOAD_BYTES`.
        limit: u64,
    },
}

/// A checked request for a new upload contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewUpload {
    /// The client's filename, kept as a label only: it never becomes part of a key, so a
    /// name like `../../x.mp4` is harmless and kept as the client sent it.
    pub filename: String,
    /// Lower-cased media type without parameters, one of [`ACCEPTED_CONTENT_TYPES`].
    pub content_type: String,
    /// Exact byte count the object must have at confirm.
    pub size_bytes: u64,
}

impl NewUpload {
    /// Checks a client's request against the accepted types and the size limit.
    pub fn parse(
        filename: &str,
        content_type: &str,
        size_bytes: i64,
        max_bytes: u64,
    ) -> Result<Self, UploadRequestError> {
        let filename = filename.trim();
        let filename_ok = (1..=255).contains(&filename.chars().count())
            && !filename.chars().any(char::is_control);
        if !filename_ok {
            return Err(UploadRequestError::BadFilename);
        }
        let media_type = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if !ACCEPTED_CONTENT_TYPES.contains(&media_type.as_str()) {
            return Err(UploadRequestError::UnsupportedMediaType(
                content_type.to_owned(),
            ));
        }
        let size = u64::try_from(size_bytes)
            .ok()
            .filter(|&s| s > 0)
            .ok_or(UploadRequestError::BadSize)?;
        if size > max_bytes {
            return Err(UploadRequestError::TooLarge {
                declared: size,
                limit: max_bytes,
            });
        }
        Ok(Self {
            filename: filename.to_owned(),
            content_type: media_type,
            size_bytes: size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn accepts_video_types_with_parameters_and_any_case() {
        let up = NewUpload::parse("clip.mp4", "Video/MP4; codecs=avc1", 10, GIB).unwrap();
        assert_eq!(up.content_type, "video/mp4");
        assert_eq!(up.size_bytes, 10);
    }

    #[test]
    fn refuses_non_video_types() {
        assert!(matches!(
            NewUpload::parse("a.mp4", "application/vnd.apple.mpegurl", 10, GIB),
            Err(UploadRequestError::UnsupportedMediaType(_))
        ));
        assert!(matches!(
            NewUpload::parse("a.txt", "text/plain", 10, GIB),
            Err(UploadRequestError::UnsupportedMediaType(_))
        ));
    }

    #[test]
    fn refuses_bad_sizes_and_sizes_over_the_limit() {
        assert_eq!(
            NewUpload::parse("a", "video/mp4", 0, GIB),
            Err(UploadRequestError::BadSize)
        );
        assert_eq!(
            NewUpload::parse("a", "video/mp4", -5, GIB),
            Err(UploadRequestError::BadSize)
        );
        assert_eq!(
            NewUpload::parse("a", "video/mp4", 11, 10),
            Err(UploadRequestError::TooLarge {
                declared: 11,
                limit: 10
            })
        );
    }

    #[test]
    fn refuses_empty_or_overlong_filenames_and_control_characters() {
        for bad in ["", "  ", "a\nb", "a\u{1b}[31m", &"x".repeat(256)] {
            assert_eq!(
                NewUpload::parse(bad, "video/mp4", 1, GIB),
                Err(UploadRequestError::BadFilename),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn states_round_trip_through_their_database_spelling() {
        for s in [
            UploadState::Receiving,
            UploadState::Pending,
            UploadState::Confirmed,
            UploadState::Rejected,
            UploadState::Expired,
        ] {
            assert_eq!(s.as_str().parse::<UploadState>().unwrap(), s);
        }
        assert!(UploadState::Pending.confirmable());
        assert!(!UploadState::Confirmed.confirmable());
    }
}
