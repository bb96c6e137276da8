//! How an error becomes an answer: each application error gets its stable code
//! ([`ErrorCode`], which carries the status), the message the client may see and the log line
//! the operator needs, in one place ([`From<AppError>`]).
//!
//! Bodies are `{"error": {"code", "message"}}`. A 5xx body is opaque; its full cause chain
//! goes to the log.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use crate::app::{AppError, LiveFileError, ReceiveError, UploadError, WebhookError};
use crate::domain::upload::UploadRequestError;

use super::error_code::ErrorCode;

/// An error response: status, stable code and a message safe to show the client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
    /// Seconds for a `Retry-After` header, when the client should wait before trying again.
    retry_after: Option<u64>,
}

/// The body of every error answer: `{"error": {"code", "message"}}`.
#[derive(Serialize, ToSchema)]
#[schema(as = ErrorBody)]
pub struct Body<'a> {
    /// What went wrong.
    error: Detail<'a>,
}

/// The `error` object of an error answer.
#[derive(Serialize, ToSchema)]
#[schema(as = ErrorDetail)]
pub struct Detail<'a> {
    /// The stable code: clients branch on it; it never changes meaning.
    #[schema(schema_with = code_schema)]
    code: &'a str,
    /// A sentence for people; its wording may change.
    message: &'a str,
}

fn code_schema() -> utoipa::openapi::Object {
    let meanings: String = ErrorCode::ALL
        .iter()
        .map(|code| {
            format!(
                "\n- `{}` ({}): {}",
                code.as_str(),
                code.status().as_u16(),
                code.sentence()
            )
        })
        .collect();
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .description(Some(format!(
            "The stable code: clients branch on it; it never changes meaning.{meanings}"
        )))
        .enum_values(Some(ErrorCode::ALL.iter().map(|code| code.as_str())))
        .build()
}

impl ApiError {
    fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::with_status(code.status(), code, message)
    }

    /// An answer whose status is not its code's own (one the HTTP layer chose).
    fn with_status(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: retry_after(code),
        }
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    /// An answer whose message is its code's fixed one ([`opaque_message`]).
    fn opaque(code: ErrorCode) -> Self {
        Self::new(code, opaque_message(code).unwrap_or(code.sentence()))
    }

    /// 401 `unauthorized`.
    pub fn unauthorized() -> Self {
        Self::opaque(ErrorCode::Unauthorized)
    }

    /// 404 `not_found`; the same for an unknown id and a stranger's, so ids can't be probed.
    pub fn not_found() -> Self {
        Self::opaque(ErrorCode::NotFound)
    }

    /// 408 `request_timeout`: the body stopped coming. The connection is closed, since the
    /// rest of the body may still arrive.
    pub fn request_timeout() -> Self {
        Self::opaque(ErrorCode::RequestTimeout)
    }

    /// 412 `unsupported_version`: a tus request of another protocol version.
    pub fn precondition_failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::UnsupportedVersion, message)
    }

    /// 403 `origin_not_allowed`: a browser preflight from an origin not in
    /// `VIDQ_CORS_ALLOW_ORIGINS`.
    pub fn forbidden_origin(origin: &str) -> Self {
        Self::new(
            ErrorCode::OriginNotAllowed,
            format!("pages at {origin} may not call this API (VIDQ_CORS_ALLOW_ORIGINS)"),
        )
    }

    /// 409 `excluded`: a live file after its recording's cutoff, kept out of it.
    pub fn excluded() -> Self {
        Self::new(
            ErrorCode::Excluded,
            "the recording has ended and its cutoff has passed: this file is not part of it",
        )
    }

    /// This error as an answer.
    pub fn into_response(self) -> HttpResponse {
        self.error_response()
    }

    /// 413 `too_large`.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TooLarge, message)
    }

    /// 400 `body_interrupted`, with what to do on this route.
    pub fn body_interrupted(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BodyInterrupted, message)
    }

    /// 415 `unsupported_media_type`.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::UnsupportedMediaType, message)
    }

    /// 429 `too_many_connections`: the client's address holds the most connections it may.
    pub fn too_many_connections(max: u32) -> Self {
        Self::new(
            ErrorCode::TooManyConnections,
            format!("one client may hold {max} connections; close some and retry"),
        )
    }

    /// The JSON body for an answer the HTTP layer made without one (a 405 from routing...).
    pub fn for_status(status: StatusCode) -> Self {
        let (code, message) = match status {
            StatusCode::METHOD_NOT_ALLOWED => (
                ErrorCode::MethodNotAllowed,
                "this path does not take this method; see the Allow header",
            ),
            StatusCode::NOT_FOUND => (ErrorCode::NotFound, "no such resource"),
            StatusCode::PAYLOAD_TOO_LARGE => (ErrorCode::TooLarge, "the request is too large"),
            StatusCode::REQUEST_TIMEOUT => (ErrorCode::RequestTimeout, "the request took too long"),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
                ErrorCode::HeadersTooLarge,
                "the request headers are too large",
            ),
            s if s.is_server_error() => (ErrorCode::Internal, "internal error"),
            _ => (ErrorCode::BadRequest, "the request is malformed"),
        };
        Self::with_status(status, code, message)
    }

    /// 503 `unavailable`: the database is out of reach for a moment; the client retries.
    pub fn unavailable() -> Self {
        Self::opaque(ErrorCode::Unavailable)
    }

    /// 500 `internal`, opaque; the caller logs the cause.
    pub fn internal() -> Self {
        Self::opaque(ErrorCode::Internal)
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.code.as_str()
    }

    /// The HTTP status, as a number (for servers other than actix's).
    pub fn status_u16(&self) -> u16 {
        self.status.as_u16()
    }

    /// The JSON body every error answer carries.
    pub fn body_json(&self) -> String {
        serde_json::to_string(&Body {
            error: Detail {
                code: self.code.as_str(),
                message: &self.message,
            },
        })
        .expect("an error body serializes")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code.as_str(),
            self.message
        )
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status);
        // The client may still be sending (a stalled body) or opening connections: end this
        // one rather than read what follows.
        if self.status == StatusCode::REQUEST_TIMEOUT || self.code == ErrorCode::TooManyConnections
        {
            response.force_close();
        }
        if let Some(seconds) = self.retry_after {
            response.insert_header((actix_web::http::header::RETRY_AFTER, seconds.to_string()));
        }
        response.json(Body {
            error: Detail {
                code: self.code.as_str(),
                message: &self.message,
            },
        })
    }
}

impl From<AppError> for ApiError {
    fn from(err: AppError) -> Self {
        log(&err);
        let code = code_of(&err);
        match opaque_message(code) {
            Some(_) => Self::opaque(code),
            None => Self::new(code, err.to_string()),
        }
    }
}

/// The stable code of each application error: its own kinds here, each concern's in a
/// function of its own.
fn code_of(err: &AppError) -> ErrorCode {
    use ErrorCode as C;
    match err {
        AppError::NotFound => C::NotFound,
        AppError::Unauthorized => C::Unauthorized,
        AppError::BadRequest(_) => C::BadRequest,
        AppError::TooManyOpen { kind, .. } => match kind {
            crate::app::open_work::OpenWork::Uploads => C::TooManyOpenUploads,
            crate::app::open_work::OpenWork::Recordings => C::TooManyOpenRecordings,
        },
        AppError::NameTaken(_) => C::Conflict,
        AppError::PlaybackToken(_) => C::InvalidToken,
        AppError::Database(db) if db.is_unavailable() => C::Unavailable,
        AppError::ConfirmsStopped => C::Unavailable,
        AppError::Storage(_) => C::StorageUnavailable,
        AppError::Database(_) | AppError::Playlist(_) => C::Internal,
        AppError::Upload(err) => upload_code(err),
        AppError::Receive(err) => receive_code(err),
        AppError::LiveFile(err) => live_file_code(err),
        AppError::Webhook(err) => webhook_code(err),
    }
}

fn upload_code(err: &UploadError) -> ErrorCode {
    use ErrorCode as C;
    match err {
        UploadError::InvalidUpload(kind) => match kind {
            UploadRequestError::UnsupportedMediaType(_) => C::UnsupportedMediaType,
            UploadRequestError::TooLarge { .. } => C::TooLarge,
            UploadRequestError::BadFilename | UploadRequestError::BadSize => C::BadRequest,
        },
        UploadError::UploadIncomplete => C::UploadIncomplete,
        // The bytes are well formed; they conflict with the size the contract declared.
        UploadError::SizeMismatch { .. } => C::SizeMismatch,
        UploadError::UploadClosed { .. } => C::UploadClosed,
    }
}

fn receive_code(err: &ReceiveError) -> ErrorCode {
    use crate::app::ingest::BodyError;
    use ErrorCode as C;
    match err {
        ReceiveError::IngestDisabled => C::IngestDisabled,
        ReceiveError::NotThroughVidq => C::PresignedUpload,
        ReceiveError::WrongNode { .. } => C::WrongNode,
        ReceiveError::UploadBusy => C::UploadBusy,
        ReceiveError::UploadGone { .. } | ReceiveError::SpoolLost => C::UploadGone,
        ReceiveError::UploadComplete => C::UploadComplete,
        ReceiveError::UploadTooFragmented => C::UploadTooFragmented,
        ReceiveError::WholeFileOnly | ReceiveError::ResumableInProgress { .. } => {
            C::WrongUploadMethod
        }
        ReceiveError::SpoolBusy(_) => C::SpoolBusy,
        ReceiveError::OffsetMismatch { .. } => C::OffsetMismatch,
        ReceiveError::PastUploadLength { .. } => C::TooLarge,
        ReceiveError::ChecksumMismatch => C::ChecksumMismatch,
        ReceiveError::BodyInterrupted(BodyError::Idle) => C::RequestTimeout,
        ReceiveError::BodyInterrupted(BodyError::Broken) => C::BodyInterrupted,
        ReceiveError::ContentTypeMismatch { .. } => C::UnsupportedMediaType,
        ReceiveError::SpoolFull => C::InsufficientStorage,
        ReceiveError::Spool(_) => C::SpoolUnavailable,
    }
}

fn live_file_code(err: &LiveFileError) -> ErrorCode {
    match err {
        LiveFileError::BadIngestName(_) => ErrorCode::BadFileName,
        LiveFileError::FileLanded => ErrorCode::FileLanded,
        LiveFileError::EmptyFile => ErrorCode::EmptyFile,
        LiveFileError::NoVideoStream(_) => ErrorCode::NoVideoStream,
    }
}

fn webhook_code(err: &WebhookError) -> ErrorCode {
    match err {
        WebhookError::WebhookUrl(_) => ErrorCode::InvalidWebhookUrl,
        WebhookError::EventTypes(_) => ErrorCode::InvalidEventTypes,
        WebhookError::EndpointDisabled(_) => ErrorCode::EndpointDisabled,
        WebhookError::NotSubscribed(_) => ErrorCode::EventTypeNotSubscribed,
        WebhookError::TooManyResends(_) => ErrorCode::TooManyResends,
    }
}

/// The client's message for a code whose error text is not the client's to see (a 5xx,
/// whose cause goes to the log) or says less than this; `None` where the error's own text
/// is the message.
fn opaque_message(code: ErrorCode) -> Option<&'static str> {
    Some(match code {
        ErrorCode::Unauthorized => "send a valid API key as `Authorization: Bearer <key>`",
        ErrorCode::NotFound => "no such resource",
        ErrorCode::RequestTimeout => "the request body stopped arriving; send it again",
        ErrorCode::Unavailable => "the service is temporarily unavailable; retry",
        ErrorCode::SpoolUnavailable => "the upload spool is temporarily unavailable; retry",
        ErrorCode::StorageUnavailable => "object storage is temporarily unavailable; retry",
        ErrorCode::Internal => "internal error",
        _ => return None,
    })
}

/// Seconds a client waits before it tries again (`Retry-After`), for the codes that say so.
fn retry_after(code: ErrorCode) -> Option<u64> {
    match code {
        ErrorCode::UploadBusy | ErrorCode::SpoolBusy | ErrorCode::Unavailable => Some(1),
        ErrorCode::InsufficientStorage => Some(30),
        ErrorCode::TooManyResends => Some(crate::app::webhooks::RESEND_WINDOW.as_secs()),
        _ => None,
    }
}

/// The log line an error needs: the database's or S3's absence passes (WARN); anything that
/// needs the operator is an ERROR with its whole cause chain; the client's own mistakes are
/// not logged here.
fn log(err: &AppError) {
    match err {
        AppError::Database(db) if db.is_unavailable() => log_unavailable(err),
        // S3 refusing vidq (credentials, a policy, a missing bucket) needs the operator.
        AppError::Storage(storage) if storage.outage => {
            tracing::warn!(error = %crate::telemetry::error_chain(err), "request failed: object storage is unavailable");
        }
        AppError::Receive(ReceiveError::Spool(_))
        | AppError::ConfirmsStopped
        | AppError::Storage(_)
        | AppError::Database(_)
        | AppError::Playlist(_) => log_internal(err),
        _ => {}
    }
}

/// A request the database's absence failed: a WARN, not an ERROR, since the pool reconnects
/// on its own once the server answers again (a restart, a failover) and nothing is lost.
fn log_unavailable(err: &AppError) {
    tracing::warn!(error = %crate::telemetry::error_chain(err), "request failed: the database is unavailable");
}

fn log_internal(err: &AppError) {
    tracing::error!(error = %crate::telemetry::error_chain(err), "request failed");
}
