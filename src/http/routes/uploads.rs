//! `POST /v1/uploads` and `POST /v1/uploads/{id}/confirm`.

use actix_web::{HttpResponse, web};

use super::path_id;
use super::playback::ApiBase;
use crate::app::{self, AppContext, uploads::Confirmed};
use crate::http::auth::Caller;
use crate::http::dto::{CreateUploadRequest, CreateUploadResponse, VideoDto};
use crate::http::error::ApiError;
use crate::http::json::JsonBody;

/// Issues an upload contract: `201` with a presigned PUT URL to a server-chosen key.
pub async fn create(
    ctx: web::Data<AppContext>,
    caller: Caller,
    body: JsonBody<CreateUploadRequest>,
) -> Result<HttpResponse, ApiError> {
    let created = app::uploads::create_upload(
        &ctx,
        caller.0,
        &body.filename,
        &body.content_type,
        body.size_bytes,
    )
    .await?;
    Ok(HttpResponse::Created().json(CreateUploadResponse::from(created)))
}

/// Confirms an upload: `202` with the new video the first time, `200` with the same video on
/// every repeat.
pub async fn confirm(
    ctx: web::Data<AppContext>,
    caller: Caller,
    base: ApiBase,
    upload_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let upload_id = path_id(&upload_id)?;
    Ok(
        match app::uploads::confirm_upload(&ctx, caller.0, upload_id).await? {
            Confirmed::Created(video) => {
                HttpResponse::Accepted().json(VideoDto::new(video, &base.0))
            }
            Confirmed::AlreadyConfirmed(video) => {
                HttpResponse::Ok().json(VideoDto::new(video, &base.0))
            }
        },
    )
}
