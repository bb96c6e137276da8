//! `POST /v1/uploads`, `GET /v1/uploads/{id}`, `PUT /v1/uploads/{id}/content` and
//! `POST /v1/uploads/{id}/confirm`.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};

use super::playback::ApiBase;
use super::{path_id, path_id_after_key};
use crate::app::ReceiveError;
use crate::app::{self, AppContext, ingest::Receive, uploads::Confirmed};
use crate::domain::tus::Checksum;
use crate::domain::upload::UploadVia;
use crate::http::auth::{Caller, PresentedKey};
use crate::http::dto::{
    CreateUploadRequest, CreateUploadResponse, CreateVidqUploadResponse, CreatedUploadDto,
    UploadStatusDto, VideoDto,
};
use crate::http::error::ApiError;
use crate::http::json::JsonBody;
use crate::http::openapi::{
    Bytes, ChecksumMismatch, Conflict, KeyErrors, NotFound, ReceiveErrors, RequestTimeout,
    TooLarge, UnsupportedMediaType,
};

/// Issues an upload contract: `201` with a presigned PUT URL to a server-chosen key, or
/// with `"via": "vidq"`, vidq's own URL to PUT the file to.
#[utoipa::path(
    post,
    path = "/v1/uploads",
    tag = "uploads",
    operation_id = "create_upload",
    security(("api_key" = [])),
    request_body = CreateUploadRequest,
    responses(
        (status = 201, description = "The upload contract.", body = CreatedUploadDto),
        (status = 408, response = RequestTimeout),
        (status = 413, response = TooLarge),
        (status = 415, response = UnsupportedMediaType),
        KeyErrors,
    ),
)]
pub async fn create(
    ctx: web::Data<AppContext>,
    caller: Caller,
    base: ApiBase,
    body: JsonBody<CreateUploadRequest>,
) -> Result<HttpResponse, ApiError> {
    let via = match body.via.as_deref() {
        None => UploadVia::Presigned,
        Some(raw) => raw
            .parse()
            .map_err(|_| ApiError::bad_request("`via` must be \"presigned\" or \"vidq\""))?,
    };
    if via == UploadVia::Vidq {
        let checksum = body
            .checksum
            .as_deref()
            .map(Checksum::from_ledger)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("`checksum`: {e}")))?;
        let created = app::ingest::create(
            &ctx,
            caller.0,
            &body.filename,
            &body.content_type,
            body.size_bytes,
            checksum,
            None,
        )
        .await?;
        let headers = BTreeMap::from([("content-type".to_owned(), body.content_type.clone())]);
        return Ok(HttpResponse::Created().json(CreatedUploadDto::Vidq(
            CreateVidqUploadResponse {
                upload_id: created.id.to_string(),
                via: UploadVia::Vidq.as_str(),
                upload_url: format!("{}/v1/uploads/{}/content", base.0, created.id),
                method: "PUT",
                headers,
                expires_at: created.expires_at,
            },
        )));
    }
    if body.checksum.is_some() {
        return Err(ApiError::bad_request(
            "`checksum` is taken with \"via\": \"vidq\" only",
        ));
    }
    let created = app::uploads::create_upload(
        &ctx,
        caller.0,
        &body.filename,
        &body.content_type,
        body.size_bytes,
    )
    .await?;
    Ok(
        HttpResponse::Created().json(CreatedUploadDto::Presigned(CreateUploadResponse::from(
            created,
        ))),
    )
}

/// Confirms an upload: `202` with the new video the first time, `200` with the same video on
/// every repeat.
#[utoipa::path(
    post,
    path = "/v1/uploads/{upload_id}/confirm",
    tag = "uploads",
    operation_id = "confirm_upload",
    security(("api_key" = [])),
    params(("upload_id" = String, Path, format = Uuid, description = "The upload.")),
    responses(
        (status = 200, description = "Confirmed before: the same video.", body = VideoDto),
        (status = 202, description = "Confirmed now: the new video, queued.", body = VideoDto),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        KeyErrors,
    ),
)]
pub async fn confirm(
    ctx: web::Data<AppContext>,
    key: PresentedKey,
    base: ApiBase,
    upload_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let upload_id = path_id_after_key(&ctx, &key, &upload_id).await?;
    Ok(
        match app::uploads::confirm_upload_with_key(&ctx, &key.0, upload_id).await? {
            Confirmed::Created(video) => {
                HttpResponse::Accepted().json(VideoDto::new(video, &base.0))
            }
            Confirmed::AlreadyConfirmed(video) => {
                HttpResponse::Ok().json(VideoDto::new(video, &base.0))
            }
        },
    )
}

/// Where an upload stands: state, bytes received, why it was rejected, its video.
#[utoipa::path(
    get,
    path = "/v1/uploads/{upload_id}",
    tag = "uploads",
    operation_id = "get_upload",
    security(("api_key" = [])),
    params(("upload_id" = String, Path, format = Uuid, description = "The upload.")),
    responses(
        (status = 200, description = "The upload's state.", body = UploadStatusDto),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
pub async fn status(
    ctx: web::Data<AppContext>,
    caller: Caller,
    upload_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let upload_id = path_id(&upload_id)?;
    let status = app::ingest::status(&ctx, caller.0, upload_id).await?;
    Ok(HttpResponse::Ok().json(UploadStatusDto::from(status)))
}

/// The single-request upload of a `"via": "vidq"` contract: the whole file, streamed to
/// the spool and fsynced (or, with the `s3` store, into S3's parts); `200` with the upload's
/// status once it is all there (vidq lands it in S3 and confirms it without the client). A contract made with a `checksum` is
/// checked against it: `460` on a mismatch, and nothing is kept.
#[utoipa::path(
    put,
    path = "/v1/uploads/{upload_id}/content",
    tag = "uploads",
    operation_id = "put_upload_content",
    security(("api_key" = [])),
    params(("upload_id" = String, Path, format = Uuid, description = "The upload.")),
    request_body(
        description = "The whole file, exactly `size_bytes` long. Its `Content-Type` is the \
            contract's `content_type`, `application/octet-stream`, or none.",
        content = inline(Bytes),
        content_type = "application/octet-stream",
    ),
    responses(
        (status = 200, description = "All bytes are on the spool; vidq lands them in S3 and \
            confirms.", body = UploadStatusDto),
        (status = 415, response = UnsupportedMediaType),
        (status = 460, response = ChecksumMismatch),
        ReceiveErrors,
        KeyErrors,
    ),
)]
pub async fn put_content(
    ctx: web::Data<AppContext>,
    caller: Caller,
    req: HttpRequest,
    upload_id: web::Path<String>,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let upload_id = path_id(&upload_id)?;
    let content_type = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .map(|v| {
            v.to_str()
                .map(str::to_owned)
                .map_err(|_| ApiError::bad_request("the Content-Type header is not text"))
        })
        .transpose()?;
    let receive = Receive {
        offset: None,
        length: super::tus::content_length(&req)?,
        checksum: None,
        content_type,
    };
    app::ingest::receive(
        &ctx,
        caller.0,
        upload_id,
        receive,
        super::tus::body_stream(body),
    )
    .await
    .map_err(|error| match error {
        // The single PUT has no offset to resume from: the whole file is sent again.
        crate::app::AppError::Receive(ReceiveError::BodyInterrupted(
            crate::app::ingest::BodyError::Broken,
        )) => ApiError::body_interrupted(
            "the request body ended early; nothing was kept: PUT the whole file again",
        ),
        other => other.into(),
    })?;
    let status = app::ingest::status(&ctx, caller.0, upload_id).await?;
    Ok(HttpResponse::Ok().json(UploadStatusDto::from(status)))
}
