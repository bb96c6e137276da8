//! The one table from error kinds to HTTP status and stable error code.
//!
//! Bodies are `{"error": {"code", "message"}}`. Codes are part of the API contract and never
//! change meaning. A 5xx body is opaque; its full cause chain goes to the log.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use crate::app::AppError;
use crate::domain::upload::UploadRequestError;

/// tus's status for a checksum that does not match (not an IANA status; the tus checksum
/// extension defines it).
fn checksum_mismatch_status() -> StatusCode {
    StatusCode::from_u16(460).expect("460 is a valid status code")
}

/// An error response: status, stable code and a message safe to show the client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Seconds for a `Retry-After` header, when the client should wait before trying again.
    retry_after: Option<u64>,
}

/// Every stable error code an answer may carry. The OpenAPI document lists them as the
/// values of `error.code`, and a debug build refuses to build an error with a code not
/// here, so the list cannot fall behind the constructors below.
pub const CODES: &[&str] = &[
    "bad_request",
    "unauthorized",
    "not_found",
    "request_timeout",
    "unsupported_version",
    "origin_not_allowed",
    "excluded",
    "file_landed",
    "empty_file",
    "no_video_stream",
    "too_large",
    "unsupported_media_type",
    "too_many_connections",
    "method_not_allowed",
    "headers_too_large",
    "internal",
    "upload_incomplete",
    "size_mismatch",
    "upload_closed",
    "ingest_disabled",
    "presigned_upload",
    "wrong_node",
    "upload_busy",
    "upload_gone",
    "upload_complete",
    "bad_file_name",
    "wrong_upload_method",
    "spool_busy",
    "offset_mismatch",
    "checksum_mismatch",
    "body_interrupted",
    "spool_unavailable",
    "insufficient_storage",
    "invalid_webhook_url",
    "invalid_event_types",
    "endpoint_disabled",
    "event_type_not_subscribed",
    "too_many_resends",
    "too_many_open_uploads",
    "too_many_open_recordings",
    "conflict",
    "invalid_token",
    "unavailable",
    "storage_unavailable",
];

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
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .description(Some(
            "The stable code: clients branch on it; it never changes meaning.",
        ))
        .enum_values(Some(CODES.iter().copied()))
        .build()
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        debug_assert!(CODES.contains(&code), "{code} is missing from CODES");
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    /// 401 `unauthorized`.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send a valid API key as `Authorization: Bearer <key>`",
        )
    }

    /// 404 `not_found`; the same for an unknown id and a stranger's, so ids can't be probed.
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "no such resource")
    }

    /// 408 `request_timeout`: the body stopped coming. The connection is closed, since the
    /// rest of the body may still arrive.
    pub fn request_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the request body stopped arriving; send it again",
        )
    }

    /// 412 `unsupported_version`: a tus request of another protocol version.
    pub fn precondition_failed(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PRECONDITION_FAILED,
            "unsupported_version",
            message,
        )
    }

    /// 403 `origin_not_allowed`: a browser preflight from an origin not in
    /// `VIDQ_CORS_ALLOW_ORIGINS`.
    pub fn forbidden_origin(origin: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            format!("pages at {origin} may not call this API (VIDQ_CORS_ALLOW_ORIGINS)"),
        )
    }

    /// 409 `excluded`: a live file after its recording's cutoff, kept out of it.
    pub fn excluded() -> Self {
        Self::new(
            StatusCode::CONFLICT,
            "excluded",
            "the recording has ended and its cutoff has passed: this file is not part of it",
        )
    }

    /// This error as an answer.
    pub fn into_response(self) -> HttpResponse {
        self.error_response()
    }

    /// 413 `too_large`.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    /// 400 `body_interrupted`, with what to do on this route.
    pub fn body_interrupted(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "body_interrupted", message)
    }

    /// 415 `unsupported_media_type`.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            message,
        )
    }

    /// 429 `too_many_connections`: the client's address holds the most connections it may.
    pub fn too_many_connections(max: u32) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_connections",
            format!("one client may hold {max} connections; close some and retry"),
        )
    }

    /// The JSON body for an answer the HTTP layer made without one (a 405 from routing...).
    pub fn for_status(status: StatusCode) -> Self {
        let (code, message) = match status {
            StatusCode::METHOD_NOT_ALLOWED => (
                "method_not_allowed",
                "this path does not take this method; see the Allow header",
            ),
            StatusCode::NOT_FOUND => ("not_found", "no such resource"),
            StatusCode::PAYLOAD_TOO_LARGE => ("too_large", "the request is too large"),
            StatusCode::REQUEST_TIMEOUT => ("request_timeout", "the request took too long"),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
                ("headers_too_large", "the request headers are too large")
            }
            s if s.is_server_error() => ("internal", "internal error"),
            _ => ("bad_request", "the request is malformed"),
        };
        Self::new(status, code, message)
    }

    /// 503 `unavailable`: the database is out of reach for a moment; the client retries.
    pub fn unavailable() -> Self {
        Self {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the service is temporarily unavailable; retry",
            )
        }
    }

    /// 500 `internal`, opaque; the caller logs the cause.
    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The HTTP status, as a number (for servers other than actix's).
    pub fn status_u16(&self) -> u16 {
        self.status.as_u16()
    }

    /// The JSON body every error answer carries.
    pub fn body_json(&self) -> String {
        serde_json::to_string(&Body {
            error: Detail {
                code: self.code,
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
            self.code,
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
        if self.status == StatusCode::REQUEST_TIMEOUT || self.code == "too_many_connections" {
            response.force_close();
        }
        if let Some(seconds) = self.retry_after {
            response.insert_header((actix_web::http::header::RETRY_AFTER, seconds.to_string()));
        }
        response.json(Body {
            error: Detail {
                code: self.code,
                message: &self.message,
            },
        })
    }
}

impl From<AppError> for ApiError {
    fn from(err: AppError) -> Self {
        use StatusCode as S;
        let message = err.to_string();
        match &err {
            AppError::NotFound => Self::not_found(),
            AppError::Unauthorized => Self::unauthorized(),
            AppError::BadRequest(_) => Self::bad_request(message),
            AppError::InvalidUpload(kind) => match kind {
                UploadRequestError::UnsupportedMediaType(_) => {
                    Self::new(S::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", message)
                }
                UploadRequestError::TooLarge { .. } => {
                    Self::new(S::PAYLOAD_TOO_LARGE, "too_large", message)
                }
                UploadRequestError::BadFilename | UploadRequestError::BadSize => {
                    Self::bad_request(message)
                }
            },
            AppError::UploadIncomplete => Self::new(S::CONFLICT, "upload_incomplete", message),
            // The bytes are well formed; they conflict with the size the contract declared.
            AppError::SizeMismatch { .. } => Self::new(S::CONFLICT, "size_mismatch", message),
            AppError::UploadClosed { .. } => Self::new(S::CONFLICT, "upload_closed", message),
            AppError::IngestDisabled => {
                Self::new(S::SERVICE_UNAVAILABLE, "ingest_disabled", message)
            }
            AppError::NotThroughVidq => Self::new(S::CONFLICT, "presigned_upload", message),
            AppError::WrongNode { .. } => Self::new(S::MISDIRECTED_REQUEST, "wrong_node", message),
            AppError::UploadBusy => Self {
                retry_after: Some(1),
                ..Self::new(S::LOCKED, "upload_busy", message)
            },
            AppError::UploadGone { .. } | AppError::SpoolLost => {
                Self::new(S::GONE, "upload_gone", message)
            }
            AppError::UploadComplete => Self::new(S::CONFLICT, "upload_complete", message),
            AppError::UploadTooFragmented => {
                Self::new(S::CONFLICT, "upload_too_fragmented", message)
            }
            AppError::BadIngestName(_) => Self::new(S::BAD_REQUEST, "bad_file_name", message),
            AppError::WholeFileOnly | AppError::ResumableInProgress { .. } => {
                Self::new(S::CONFLICT, "wrong_upload_method", message)
            }
            AppError::FileLanded => Self::new(S::CONFLICT, "file_landed", message),
            AppError::EmptyFile => Self::new(S::BAD_REQUEST, "empty_file", message),
            AppError::NoVideoStream(_) => {
                Self::new(S::UNPROCESSABLE_ENTITY, "no_video_stream", message)
            }
            AppError::SpoolBusy(_) => Self {
                retry_after: Some(1),
                ..Self::new(S::SERVICE_UNAVAILABLE, "spool_busy", message)
            },
            AppError::OffsetMismatch { .. } => Self::new(S::CONFLICT, "offset_mismatch", message),
            AppError::PastUploadLength { .. } => {
                Self::new(S::PAYLOAD_TOO_LARGE, "too_large", message)
            }
            AppError::ChecksumMismatch => {
                Self::new(checksum_mismatch_status(), "checksum_mismatch", message)
            }
            AppError::BodyInterrupted(crate::app::ingest::BodyError::Idle) => {
                Self::request_timeout()
            }
            AppError::BodyInterrupted(crate::app::ingest::BodyError::Broken) => {
                Self::new(S::BAD_REQUEST, "body_interrupted", message)
            }
            AppError::ContentTypeMismatch { .. } => {
                Self::new(S::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", message)
            }
            AppError::TooManyOpen { kind, .. } => Self::new(
                S::TOO_MANY_REQUESTS,
                match kind {
                    crate::app::open_work::OpenWork::Uploads => "too_many_open_uploads",
                    crate::app::open_work::OpenWork::Recordings => "too_many_open_recordings",
                },
                message,
            ),
            AppError::SpoolFull => Self {
                retry_after: Some(30),
                ..Self::new(S::INSUFFICIENT_STORAGE, "insufficient_storage", message)
            },
            AppError::Spool(_) => {
                log_internal(&err);
                Self::new(
                    S::SERVICE_UNAVAILABLE,
                    "spool_unavailable",
                    "the upload spool is temporarily unavailable; retry",
                )
            }
            AppError::WebhookUrl(_) => {
                Self::new(S::UNPROCESSABLE_ENTITY, "invalid_webhook_url", message)
            }
            AppError::EventTypes(_) => Self::new(S::BAD_REQUEST, "invalid_event_types", message),
            AppError::EndpointDisabled(_) => Self::new(S::CONFLICT, "endpoint_disabled", message),
            AppError::NotSubscribed(_) => Self::new(
                S::UNPROCESSABLE_ENTITY,
                "event_type_not_subscribed",
                message,
            ),
            AppError::TooManyResends(_) => Self {
                retry_after: Some(crate::app::webhooks::RESEND_WINDOW.as_secs()),
                ..Self::new(S::TOO_MANY_REQUESTS, "too_many_resends", message)
            },
            AppError::NameTaken(_) => Self::new(S::CONFLICT, "conflict", message),
            AppError::PlaybackToken(_) => Self::new(S::FORBIDDEN, "invalid_token", message),
            AppError::Database(db) if db.is_unavailable() => {
                log_unavailable(&err);
                Self::unavailable()
            }
            AppError::ConfirmsStopped => {
                log_internal(&err);
                Self::unavailable()
            }
            AppError::Storage(storage) => {
                // An outage is expected and passes (WARN); S3 refusing vidq (credentials, a
                // policy, a missing bucket) needs the operator (ERROR).
                if storage.outage {
                    tracing::warn!(error = %crate::telemetry::error_chain(&err), "request failed: object storage is unavailable");
                } else {
                    log_internal(&err);
                }
                Self::new(
                    S::SERVICE_UNAVAILABLE,
                    "storage_unavailable",
                    "object storage is temporarily unavailable; retry",
                )
            }
            AppError::Database(_) | AppError::Playlist(_) => {
                log_internal(&err);
                Self::internal()
            }
        }
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
