//! tus 1.0.0 at `/v1/tus/`: `OPTIONS` (discovery), `POST` (creation, with the first bytes if
//! the client sends them), `HEAD` (the offset), `PATCH` (bytes at the offset), `DELETE`
//! (termination). Every request but `OPTIONS` carries `Tus-Resumable: 1.0.0` (412
//! otherwise) and the API key; every answer carries `Tus-Resumable`.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use futures_util::{Stream, StreamExt};

use super::path_id;
use super::playback::ApiBase;
use crate::app::ReceiveError;
use crate::app::ingest::{BodyError, Receive, UploadStatus};
use crate::app::{self, AppContext, AppError};
use crate::domain::tus;
use crate::domain::upload::UploadState;
use crate::http::auth::Caller;
use crate::http::error::ApiError;
use crate::http::limits::BodyIdle;
use crate::http::openapi::tus::{CreationHeaders, Discovery, PatchHeaders, VersionHeader};
use crate::http::openapi::{
    Bytes, ChecksumMismatch, Conflict, Gone, KeyErrors, Locked, MisdirectedRequest, NotFound,
    PreconditionFailed, ReceiveErrors, RequestTimeout, TooLarge, UnsupportedMediaType,
};

const TUS_RESUMABLE: &str = "Tus-Resumable";

/// Middleware for the tus routes: refuses another protocol version (412 with
/// `Tus-Version`) and stamps `Tus-Resumable` on every answer, errors included.
pub async fn protocol(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let version_ok = req.method() == Method::OPTIONS
        || req
            .headers()
            .get(TUS_RESUMABLE)
            .is_some_and(|v| v.as_bytes() == tus::VERSION.as_bytes());
    let mut res = if version_ok {
        next.call(req).await?.map_into_left_body()
    } else {
        let answer = ApiError::precondition_failed(format!(
            "send `Tus-Resumable: {}`: it is the only tus version this server speaks",
            tus::VERSION
        ))
        .error_response();
        req.into_response(answer).map_into_right_body()
    };
    let headers = res.headers_mut();
    headers.insert(
        header::HeaderName::from_static("tus-resumable"),
        HeaderValue::from_static(tus::VERSION),
    );
    if !version_ok {
        headers.insert(
            header::HeaderName::from_static("tus-version"),
            HeaderValue::from_static(tus::VERSION),
        );
    }
    Ok(res)
}

/// `OPTIONS`: what this server speaks and the largest upload it takes.
#[utoipa::path(
    options,
    path = "/v1/tus",
    tag = "tus",
    operation_id = "tus_options",
    responses((status = 204, response = Discovery)),
)]
pub async fn options(ctx: web::Data<AppContext>) -> HttpResponse {
    HttpResponse::NoContent()
        .insert_header(("Tus-Version", tus::VERSION))
        .insert_header(("Tus-Extension", tus::EXTENSIONS))
        .insert_header(("Tus-Max-Size", ctx.upload.max_upload_bytes.to_string()))
        .insert_header(("Tus-Checksum-Algorithm", tus::CHECKSUM_ALGORITHMS))
        .finish()
}

/// `OPTIONS` on an upload: the same discovery answer. The upload is not looked up, but a
/// malformed id names no upload: `404`, as on every other route.
#[utoipa::path(
    options,
    path = "/v1/tus/{upload_id}",
    tag = "tus",
    operation_id = "tus_options_upload",
    params(("upload_id" = String, Path, format = Uuid, description = "The upload.")),
    responses((status = 204, response = Discovery), (status = 404, response = NotFound)),
)]
pub async fn options_upload(
    ctx: web::Data<AppContext>,
    upload_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    path_id::<crate::domain::ids::UploadId>(&upload_id)?;
    Ok(options(ctx).await)
}

/// `POST`: a new upload from `Upload-Length` and `Upload-Metadata` (`filename`,
/// `filetype`); `201` with its `Location`. A body (creation-with-upload) is the first
/// chunk, taken like a PATCH at offset 0.
#[utoipa::path(
    post,
    path = "/v1/tus",
    tag = "tus",
    operation_id = "tus_create",
    security(("api_key" = [])),
    params(CreationHeaders),
    request_body(
        description = "Creation-with-upload: the first bytes (none for a plain creation).",
        content = inline(Bytes),
        content_type = "application/offset+octet-stream",
    ),
    responses(
        (status = 201, description = "Created; `Location` is the upload's URL.", headers(
            ("Location" = String, description = "The upload's URL."),
            ("Upload-Expires" = String, description = "When an unfinished upload expires."),
            ("Upload-Offset" = u64, description = "With a body: the bytes kept of it."),
            ("Tus-Resumable" = String, description = "`1.0.0`."),
        )),
        (status = 408, response = RequestTimeout),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = TooLarge),
        (status = 415, response = UnsupportedMediaType),
        KeyErrors,
    ),
)]
pub async fn create(
    ctx: web::Data<AppContext>,
    caller: Caller,
    base: ApiBase,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let headers = req.headers();
    let length = upload_length(&req, ctx.upload.max_upload_bytes)?;
    let metadata = tus::parse_metadata(text(&req, "Upload-Metadata")?)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let Some(filetype) = metadata.filetype.as_deref() else {
        return Err(ApiError::bad_request(
            "Upload-Metadata must name the video's media type as `filetype` (e.g. \
             `filetype dmlkZW8vbXA0` for video/mp4); tus clients send it from their metadata option",
        ));
    };
    let filename = metadata.filename.as_deref().unwrap_or("upload");
    let first_chunk = content_length(&req)?.is_some_and(|n| n > 0)
        || headers.contains_key(header::TRANSFER_ENCODING);
    if first_chunk {
        patch_content_type(&req)?;
    }
    let checksum = upload_checksum(&req)?;
    let size =
        i64::try_from(length).map_err(|_| ApiError::too_large("Upload-Length is too large"))?;
    // Kept as sent: HEAD echoes it byte for byte, every key included.
    let raw_metadata = text(&req, "Upload-Metadata")?;
    let created =
        app::ingest::create(&ctx, caller.0, filename, filetype, size, None, raw_metadata).await?;
    let location = format!("{}/v1/tus/{}", base.0, created.id);
    let mut answer = HttpResponse::Created();
    answer
        .insert_header((header::LOCATION, location))
        .insert_header(("Upload-Expires", tus::http_date(created.expires_at)));
    if first_chunk {
        let receive = Receive {
            offset: Some(0),
            length: content_length(&req)?,
            checksum,
            content_type: None,
        };
        // The upload exists whatever happens to its first bytes: the client resumes it
        // from the offset HEAD reports, so a failure here still answers 201.
        let offset = match app::ingest::receive(
            &ctx,
            caller.0,
            created.id,
            receive,
            body_stream(body),
        )
        .await
        {
            Ok(received) => received.offset,
            Err(error) => {
                tracing::info!(error = %error, "the first chunk of a new tus upload was not kept whole");
                app::ingest::status(&ctx, caller.0, created.id)
                    .await?
                    .row
                    .received_bytes as u64
            }
        };
        answer.insert_header(("Upload-Offset", offset.to_string()));
    }
    Ok(answer.finish())
}

/// A creation's `Upload-Length`: given (deferring it is not supported), at least a byte, and
/// at most `max` (`Tus-Max-Size`).
fn upload_length(req: &HttpRequest, max: u64) -> Result<u64, ApiError> {
    if req.headers().contains_key("Upload-Defer-Length") {
        return Err(ApiError::bad_request(
            "Upload-Defer-Length is not supported: send Upload-Length",
        ));
    }
    let length = tus::parse_bytes("Upload-Length", text(req, "Upload-Length")?)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if length == 0 {
        return Err(ApiError::bad_request(
            "Upload-Length must be at least 1 byte: an empty file is no video",
        ));
    }
    if length > max {
        return Err(ApiError::too_large(format!(
            "Upload-Length {length} is over Tus-Max-Size {max}"
        )));
    }
    Ok(length)
}

/// `HEAD`: the offset vidq holds (taking the upload over from a request whose client is
/// gone), the length, the metadata; never cached.
#[utoipa::path(
    head,
    path = "/v1/tus/{upload_id}",
    tag = "tus",
    operation_id = "tus_head",
    security(("api_key" = [])),
    params(
        ("upload_id" = String, Path, format = Uuid, description = "The upload."),
        VersionHeader,
    ),
    responses(
        (status = 200, description = "Where the upload stands.", headers(
            ("Upload-Offset" = u64, description = "The bytes vidq holds."),
            ("Upload-Length" = u64, description = "The declared size."),
            ("Upload-Metadata" = String, description = "`filename` and `filetype`, base64."),
            ("Upload-Expires" = String, description = "While incomplete: when it expires."),
            ("Tus-Resumable" = String, description = "`1.0.0`."),
        )),
        (status = 400, description = "`bad_request` (no body: HEAD)."),
        (status = 401, description = "`unauthorized` (no body: HEAD)."),
        (status = 404, description = "`not_found` (no body: HEAD)."),
        (status = 410, description = "`upload_gone` (no body: HEAD)."),
        (status = 412, description = "`unsupported_version` (no body: HEAD)."),
        (status = 421, description = "`wrong_node` (no body: HEAD)."),
        (status = 423, description = "`upload_busy`: the request holding the upload did not \
            let go within 5 s (no body: HEAD); retry after `Retry-After`."),
        (status = 429, description = "`too_many_connections` (no body: HEAD)."),
        (status = 503, description = "A dependency is unavailable (no body: HEAD)."),
        KeyErrors,
    ),
)]
pub async fn head(
    ctx: web::Data<AppContext>,
    caller: Caller,
    upload_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let upload_id = path_id(&upload_id)?;
    let status = app::ingest::resume_point(&ctx, caller.0, upload_id)
        .await
        .map_err(tus_error)?;
    Ok(upload_headers(&status, HttpResponse::Ok())
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish())
}

/// `PATCH`: bytes at `Upload-Offset` (409 if vidq holds another count), with an optional
/// `Upload-Checksum` (460 on mismatch, nothing kept); `204` with the new offset (and
/// `Upload-Expires` while incomplete) once the bytes are stored (fsynced in the spool, or in S3
/// with the `s3` store).
#[utoipa::path(
    patch,
    path = "/v1/tus/{upload_id}",
    tag = "tus",
    operation_id = "tus_patch",
    security(("api_key" = [])),
    params(
        ("upload_id" = String, Path, format = Uuid, description = "The upload."),
        PatchHeaders,
    ),
    request_body(
        description = "Bytes from `Upload-Offset` on.",
        content = inline(Bytes),
        content_type = "application/offset+octet-stream",
    ),
    responses(
        (status = 204, description = "The bytes are stored (in the spool, or in S3 with the `s3` store).", headers(
            ("Upload-Offset" = u64, description = "The new offset."),
            ("Upload-Expires" = String, description = "While incomplete: when it expires."),
            ("Tus-Resumable" = String, description = "`1.0.0`."),
        )),
        (status = 412, response = PreconditionFailed),
        (status = 415, response = UnsupportedMediaType),
        (status = 460, response = ChecksumMismatch),
        ReceiveErrors,
        KeyErrors,
    ),
)]
pub async fn patch(
    ctx: web::Data<AppContext>,
    caller: Caller,
    req: HttpRequest,
    upload_id: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let upload_id = path_id(&upload_id)?;
    patch_content_type(&req)?;
    let offset = tus::parse_bytes("Upload-Offset", text(&req, "Upload-Offset")?)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let receive = Receive {
        offset: Some(offset),
        length: content_length(&req)?,
        checksum: upload_checksum(&req)?,
        content_type: None,
    };
    let received = app::ingest::receive(&ctx, caller.0, upload_id, receive, body_stream(body))
        .await
        .map_err(tus_error)?;
    // Everything the answer says is known here: no second read of the row per chunk.
    let mut answer = HttpResponse::NoContent();
    answer.insert_header(("Upload-Offset", received.offset.to_string()));
    if !received.complete {
        answer.insert_header(("Upload-Expires", tus::http_date(received.expires_at)));
    }
    Ok(answer.finish())
}

/// `DELETE`: termination of an upload still receiving; its bytes are dropped.
#[utoipa::path(
    delete,
    path = "/v1/tus/{upload_id}",
    tag = "tus",
    operation_id = "tus_terminate",
    security(("api_key" = [])),
    params(
        ("upload_id" = String, Path, format = Uuid, description = "The upload."),
        VersionHeader,
    ),
    responses(
        (status = 204, description = "Terminated; its bytes are dropped.", headers(
            ("Tus-Resumable" = String, description = "`1.0.0`."),
        )),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 410, response = Gone),
        (status = 412, response = PreconditionFailed),
        (status = 421, response = MisdirectedRequest),
        (status = 423, response = Locked),
        KeyErrors,
    ),
)]
pub async fn terminate(
    ctx: web::Data<AppContext>,
    caller: Caller,
    upload_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let upload_id = path_id(&upload_id)?;
    app::ingest::terminate(&ctx, caller.0, upload_id)
        .await
        .map_err(tus_error)?;
    Ok(HttpResponse::NoContent().finish())
}

/// The methods a `POST` to a tus upload may stand for.
#[derive(utoipa::ToSchema)]
#[allow(clippy::upper_case_acronyms, dead_code)]
pub enum OverriddenMethod {
    /// Bytes at `Upload-Offset`.
    PATCH,
    /// Termination.
    DELETE,
}

/// `POST` with `X-HTTP-Method-Override: PATCH` or `DELETE`: the same as that method, for
/// clients behind proxies that pass only `GET` and `POST` (tus-js-client's
/// `overridePatchMethod`), as the tus protocol asks servers to accept.
#[utoipa::path(
    post,
    path = "/v1/tus/{upload_id}",
    tag = "tus",
    operation_id = "tus_method_override",
    security(("api_key" = [])),
    params(
        ("upload_id" = String, Path, format = Uuid, description = "The upload."),
        ("X-HTTP-Method-Override" = OverriddenMethod, Header, description = "The method \
            this `POST` stands for."),
        PatchHeaders,
    ),
    request_body(
        description = "With `PATCH`: bytes from `Upload-Offset` on.",
        content = inline(Bytes),
        content_type = "application/offset+octet-stream",
    ),
    responses(
        (status = 204, description = "As `PATCH` (the new `Upload-Offset`) or `DELETE` \
            (terminated)."),
        (status = 412, response = PreconditionFailed),
        (status = 415, response = UnsupportedMediaType),
        (status = 460, response = ChecksumMismatch),
        ReceiveErrors,
        KeyErrors,
    ),
)]
pub async fn overridden(
    ctx: web::Data<AppContext>,
    caller: Caller,
    req: HttpRequest,
    upload_id: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let method = text(&req, "X-HTTP-Method-Override")?.map(str::trim);
    match method {
        Some(m) if m.eq_ignore_ascii_case("PATCH") => {
            patch(ctx, caller, req, upload_id, body).await
        }
        Some(m) if m.eq_ignore_ascii_case("DELETE") => terminate(ctx, caller, upload_id).await,
        // A header that is missing or names another method is a malformed request.
        other => Err(ApiError::bad_request(match other {
            None => "POST to a tus upload needs X-HTTP-Method-Override: PATCH or DELETE".to_owned(),
            Some(m) => {
                format!("X-HTTP-Method-Override: {m} is not taken here; PATCH and DELETE are")
            }
        })),
    }
}

/// A presigned upload is no tus resource.
fn tus_error(error: AppError) -> ApiError {
    match error {
        AppError::Receive(ReceiveError::NotThroughVidq) => ApiError::not_found(),
        other => other.into(),
    }
}

fn upload_headers(
    status: &UploadStatus,
    mut answer: actix_web::HttpResponseBuilder,
) -> actix_web::HttpResponseBuilder {
    let row = &status.row;
    answer
        .insert_header(("Upload-Offset", row.received_bytes.to_string()))
        .insert_header(("Upload-Length", row.declared_size.to_string()))
        .insert_header((
            "Upload-Metadata",
            row.tus_metadata
                .clone()
                .unwrap_or_else(|| tus::format_metadata(&row.filename, &row.content_type)),
        ));
    if status.state == UploadState::Receiving {
        answer.insert_header(("Upload-Expires", tus::http_date(row.expires_at)));
    }
    answer
}

fn text<'a>(req: &'a HttpRequest, name: &'static str) -> Result<Option<&'a str>, ApiError> {
    req.headers()
        .get(name)
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::bad_request(format!("the {name} header is not text")))
        })
        .transpose()
}

/// The body's `Content-Length`, if the client sent one.
pub(super) fn content_length(req: &HttpRequest) -> Result<Option<u64>, ApiError> {
    text(req, "Content-Length")?
        .map(|raw| tus::parse_bytes("Content-Length", Some(raw)))
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

fn patch_content_type(req: &HttpRequest) -> Result<(), ApiError> {
    let content_type = text(req, "Content-Type")?.unwrap_or_default();
    if content_type.split(';').next().unwrap_or_default().trim() != tus::PATCH_CONTENT_TYPE {
        return Err(ApiError::unsupported_media_type(format!(
            "tus bytes are sent as Content-Type: {}",
            tus::PATCH_CONTENT_TYPE
        )));
    }
    Ok(())
}

/// `Upload-Checksum`; an empty one asks for nothing, as an empty `Upload-Metadata` does.
fn upload_checksum(req: &HttpRequest) -> Result<Option<tus::Checksum>, ApiError> {
    text(req, "Upload-Checksum")?
        .filter(|raw| !raw.trim().is_empty())
        .map(tus::parse_checksum)
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// The request body as the use-case reads it: chunks, or why they stopped.
pub(super) fn body_stream(
    body: web::Payload,
) -> impl Stream<Item = Result<web::Bytes, BodyError>> + Unpin {
    body.map(|chunk| {
        if let Ok(bytes) = &chunk {
            crate::metrics::UPLOAD_BODY_BYTES.inc_by(bytes.len() as u64);
        }
        chunk.map_err(|error| {
            if BodyIdle::is(&error) {
                BodyError::Idle
            } else {
                tracing::debug!(%error, "request body broke off");
                BodyError::Broken
            }
        })
    })
}
