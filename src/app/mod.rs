//! Use-cases: one function per transaction, called by HTTP handlers, roles and admin
//! commands alike. Each loads, checks, writes in one transaction, and touches S3 only
//! outside it (invariant I7).

pub mod auth;
pub mod confirm_batch;
pub mod deployment_marker;
pub mod doomed;
pub mod events;
pub mod ingest;
pub mod ingest_s3;
pub mod live;
pub mod live_files;
pub mod live_videos;
pub mod login_throttle;
pub mod open_work;
pub mod operators;
pub mod playback;
pub mod reconcile;
pub mod status_reads;
pub mod upload_locks;
pub mod uploads;
pub mod users;
pub mod videos;
pub mod webhooks;

use crate::adapters::storage::{Storage, StorageError};
use crate::config::UploadConfig;
use crate::db::{DbError, DbPool};
use crate::domain::upload::UploadRequestError;

/// What every use-case needs: the database, the bucket and the upload limits.
#[derive(Clone, Debug)]
pub struct AppContext {
    /// Connection pool.
    pub db: DbPool,
    /// The bucket.
    pub storage: Storage,
    /// Upload limits and URL lifetimes.
    pub upload: UploadConfig,
    /// Where webhooks may point.
    pub webhooks: crate::config::WebhookArgs,
    /// Ticks when an outbox row may have committed (long-polling feed readers wait on it).
    pub events: events::EventSignal,
    /// How playback URLs are made and playback tokens checked.
    pub playback: playback::PlaybackSettings,
    /// Where this node spools uploads through vidq (`None`: this process takes none).
    pub ingest: Option<ingest::Ingest>,
    /// Who may open the operator dashboard.
    pub operators: operators::OperatorAccess,
    /// Where confirms wait for their transaction (group commit).
    pub confirms: confirm_batch::ConfirmBatcher,
    /// Where status reads wait for their statement (reads in groups).
    pub status_reads: status_reads::StatusReads,
    /// A worker running in this same process (`vidq dev`), whose families the API's
    /// `/metrics` serves too: there it has no health listener of its own to scrape.
    pub in_process_worker: Option<InProcessWorker>,
    /// `VIDQ_READY_REQUIRES_STORAGE`: `/readyz` is 503 unless the bucket answers too.
    pub ready_requires_storage: bool,
    /// The API key the upload page at `/` comes filled in with: `vidq dev` makes one for
    /// its run; a deployed API fills in none.
    pub page_key: Option<String>,
}

/// A worker sharing the API's process: its own account of itself and its slot count.
#[derive(Clone, Debug)]
pub struct InProcessWorker {
    /// What the worker's runner records.
    pub health: std::sync::Arc<crate::telemetry::worker_health::WorkerHealth>,
    /// `VIDQ_SLOTS`.
    pub slots: u32,
}

/// Why a use-case did not do what was asked. `http::error` maps each kind to one status and
/// one stable code.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No such resource for this caller (a stranger's id reads the same as an unknown one).
    #[error("not found")]
    NotFound,
    /// The API key presented is nobody's.
    #[error("unknown API key")]
    Unauthorized,
    /// The request for a new upload broke a rule.
    #[error(transparent)]
    InvalidUpload(#[from] UploadRequestError),
    /// A query parameter or body field is malformed.
    #[error("{0}")]
    BadRequest(String),
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
    /// The spool file of an upload in progress is gone.
    #[error("the bytes received so far were lost; create a new upload")]
    SpoolLost,
    /// A live ingest file name vidq does not take.
    #[error(transparent)]
    BadIngestName(crate::domain::recording::BadName),
    /// The spool disk is full: nothing of the request past what was counted before it was
    /// kept.
    #[error(
        "this node's spool disk is full; nothing past what was already received was kept (a tus upload resumes from the offset HEAD reports); retry later"
    )]
    SpoolFull,
    /// The spool disk failed.
    #[error("the spool disk failed")]
    Spool(#[source] crate::adapters::spool::AppendError),
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
