//! Why a use-case did not do what was asked, by concern: [`AppError`] holds what any path
//! may meet (a missing row, a key, the database, S3) and one part for each concern (new
//! uploads and confirms, bytes through vidq, live files, webhooks). `http::error` gives each
//! its code, in one function per part.

use super::{ingest, open_work};
use crate::adapters::storage::StorageError;
use crate::db::DbError;
use crate::domain::upload::UploadRequestError;

/// Why a use-case did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No such resource for this caller (a stranger's id reads the same as an unknown one).
    #[error("not found")]
    NotFound,
    /// The API key presented is nobody's.
    #[error("unknown API key")]
    Unauthorized,
    /// A query parameter or body field is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The caller has as many unfinished uploads or open recordings as its cap allows.
    #[error(
        "this key has {cap} {noun}, the most allowed ({setting}); finish them, or let them expire, before starting more",
        noun = kind.noun(),
        setting = kind.setting()
    )]
    TooManyOpen {
        /// Uploads or recordings.
        kind: open_work::OpenWork,
        /// The cap.
        cap: u32,
    },
    /// `user create` with a name already in use.
    #[error("a user named {0:?} already exists")]
    NameTaken(String),
    /// The confirm's committers have stopped (the process is shutting down).
    #[error("confirms are not being committed on this node right now")]
    ConfirmsStopped,
    /// The database failed.
    #[error("database error")]
    Database(#[from] DbError),
    /// S3 failed.
    #[error("storage error")]
    Storage(#[from] StorageError),
    /// A playback URL whose token is missing, altered, for another video or expired.
    #[error(transparent)]
    PlaybackToken(#[from] crate::domain::playback_token::TokenError),
    /// A stored playlist names something vidq does not serve.
    #[error("a stored playlist cannot be served")]
    Playlist(#[from] crate::domain::hls::PlaylistError),
    /// A confirm or a new upload contract refused.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// Bytes of an upload through vidq not taken.
    #[error(transparent)]
    Receive(#[from] ReceiveError),
    /// A live file not kept.
    #[error(transparent)]
    LiveFile(#[from] LiveFileError),
    /// A webhook registration or resend refused.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
}

/// A confirm or a new upload contract the rules refuse.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The request for a new upload broke a rule.
    #[error(transparent)]
    InvalidUpload(#[from] UploadRequestError),
    /// Confirm came before the object was in S3.
    #[error("no object has been uploaded for this upload yet; PUT it to upload_url first")]
    UploadIncomplete,
    /// The object's size is not the declared size.
    #[error("the uploaded object has {actual} bytes but the upload declared {declared}")]
    SizeMismatch {
        /// What the client declared.
        declared: i64,
        /// What HEAD says.
        actual: i64,
    },
    /// The contract is rejected or expired and cannot become a video.
    #[error("the upload is {state} and can no longer be confirmed")]
    UploadClosed {
        /// Its state.
        state: crate::domain::upload::UploadState,
    },
}

/// Bytes of an upload through vidq (tus, the single PUT) that were not taken.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    /// This process takes no uploads through vidq (no spool configured).
    #[error("this server takes no uploads through vidq; use a presigned upload")]
    IngestDisabled,
    /// The id names a presigned upload, whose bytes go to S3, not to vidq.
    #[error(
        "this upload was created for a presigned PUT: send its bytes to its upload_url, or create one with \"via\": \"vidq\""
    )]
    NotThroughVidq,
    /// The upload's bytes are spooled on another node.
    #[error("this upload's bytes are on node {node:?}; send its requests to that node")]
    WrongNode {
        /// The node holding the spool file.
        node: String,
    },
    /// Another request holds the upload and did not let go.
    #[error("another request is sending this upload's bytes; retry shortly")]
    UploadBusy,
    /// The upload expired or was refused; its bytes cannot be resumed.
    #[error("the upload is {state} and takes no more bytes; create a new one")]
    UploadGone {
        /// Its state.
        state: crate::domain::upload::UploadState,
    },
    /// An `s3`-store upload used up S3's 10,000 part numbers (every failed request spends a
    /// few): it cannot take more bytes.
    #[error(
        "this upload failed too many times to take more bytes (S3's 10,000 parts are used up); create a new upload"
    )]
    UploadTooFragmented,
    /// Every byte has arrived already.
    #[error(
        "all bytes of this upload have arrived; it takes no more and can no longer be terminated"
    )]
    UploadComplete,
    /// A tus PATCH at another offset than the one vidq holds.
    #[error(
        "vidq holds {expected} bytes of this upload; send Upload-Offset: {expected} (HEAD tells the offset)"
    )]
    OffsetMismatch {
        /// The offset vidq holds.
        expected: u64,
    },
    /// More bytes than the upload's length.
    #[error(
        "the bytes sent run past the upload's length of {length}; nothing of this request was kept"
    )]
    PastUploadLength {
        /// The declared length.
        length: u64,
    },
    /// A tus PATCH to a contract whose whole-file checksum only the single PUT can check.
    #[error(
        "this upload was created with a whole-file checksum: send it with PUT /v1/uploads/{{id}}/content"
    )]
    WholeFileOnly,
    /// A single PUT to an upload whose bytes are arriving through tus.
    #[error(
        "{held} bytes of this upload arrived through tus; resume it with tus (HEAD tells the offset)"
    )]
    ResumableInProgress {
        /// Bytes held.
        held: u64,
    },
    /// A share of this node's spool writers is full: the node's, the user's or the
    /// recording's.
    #[error("{0}; retry shortly")]
    SpoolBusy(crate::adapters::writer_share::ShareFull),
    /// The client's checksum of the bytes does not match what arrived.
    #[error("the checksum does not match the bytes received; nothing of this request was kept")]
    ChecksumMismatch,
    /// The request body stopped early.
    #[error("the request body ended early; resume from the offset HEAD reports")]
    BodyInterrupted(ingest::BodyError),
    /// A single PUT whose `Content-Type` is not the contract's.
    #[error(
        "Content-Type {sent} does not match this upload's contract ({contract}); send {contract}, or no Content-Type"
    )]
    ContentTypeMismatch {
        /// What the request said.
        sent: String,
        /// What the contract says.
        contract: String,
    },
    /// The spool file of an upload in progress is gone.
    #[error("the bytes received so far were lost; create a new upload")]
    SpoolLost,
    /// The spool disk is full: nothing of the request past what was counted before it was
    /// kept.
    #[error(
        "this node's spool disk is full; nothing past what was already received was kept (a tus upload resumes from the offset HEAD reports); retry later"
    )]
    SpoolFull,
    /// The spool disk failed.
    #[error("the spool disk failed")]
    Spool(#[source] crate::adapters::spool::AppendError),
}

/// A live file an encoder sent that was not kept.
#[derive(Debug, thiserror::Error)]
pub enum LiveFileError {
    /// A live file sent again after it landed, with other bytes: a landed file is final.
    #[error(
        "this file has landed in storage with other bytes; a landed file does not change (send it under its own name, or the same bytes)"
    )]
    FileLanded,
    /// A live broadcast's init segment has no video vidq can decode; its recording failed.
    #[error("{0}; the recording has failed (no_video_stream)")]
    NoVideoStream(crate::domain::init_segment::NoVideo),
    /// A live file with no bytes.
    #[error("a recording file must not be empty; nothing was kept")]
    EmptyFile,
    /// A live ingest file name vidq does not take.
    #[error(transparent)]
    BadIngestName(crate::domain::recording::BadName),
}

/// A webhook registration or resend the rules refuse.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// A webhook URL that is malformed or points somewhere vidq does not send to.
    #[error(transparent)]
    WebhookUrl(#[from] crate::domain::destination::DestinationError),
    /// An endpoint's `event_types` list that is empty, unknown or repeats a type.
    #[error(transparent)]
    EventTypes(#[from] crate::domain::event::EventTypesError),
    /// The endpoint was turned off (it answered 410 Gone).
    #[error("the endpoint is disabled ({0}); register it again to receive events")]
    EndpointDisabled(String),
    /// A resend of an event type the endpoint is not subscribed to.
    #[error("the endpoint is not subscribed to {0} events; it would not have received this one")]
    NotSubscribed(String),
    /// Resends to one endpoint over the limit.
    #[error("at most {0} resends a minute may add deliveries to one endpoint; wait and retry")]
    TooManyResends(i64),
}

impl From<diesel::result::Error> for AppError {
    fn from(err: diesel::result::Error) -> Self {
        Self::Database(DbError::Query(err))
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for AppError {
    fn from(err: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        Self::Database(DbError::Pool(err))
    }
}

impl From<UploadRequestError> for AppError {
    fn from(err: UploadRequestError) -> Self {
        Self::Upload(UploadError::InvalidUpload(err))
    }
}

impl From<crate::domain::destination::DestinationError> for AppError {
    fn from(err: crate::domain::destination::DestinationError) -> Self {
        Self::Webhook(WebhookError::WebhookUrl(err))
    }
}

impl From<crate::domain::event::EventTypesError> for AppError {
    fn from(err: crate::domain::event::EventTypesError) -> Self {
        Self::Webhook(WebhookError::EventTypes(err))
    }
}
