//! `GET /v1/videos`, `GET /v1/videos/{id}` and `DELETE /v1/videos/{id}`.

use actix_web::{HttpResponse, web};

use super::playback::ApiBase;
use super::{path_id, path_id_after_key};
use crate::app::{self, AppContext};
use crate::domain::ids::VideoId;
use crate::domain::video::VideoStatus;
use crate::http::auth::{Caller, PresentedKey};
use crate::http::dto::{ListVideosQuery, VideoDto, VideoListDto};
use crate::http::error::ApiError;
use crate::http::openapi::{KeyErrors, NotFound};

/// Default page size of the listing.
const DEFAULT_LIMIT: i64 = 20;

/// One video's status.
#[utoipa::path(
    get,
    path = "/v1/videos/{video_id}",
    tag = "videos",
    operation_id = "get_video",
    security(("api_key" = [])),
    params(("video_id" = String, Path, format = Uuid, description = "The video.")),
    responses(
        (status = 200, description = "The video.", body = VideoDto),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
pub async fn get(
    ctx: web::Data<AppContext>,
    key: PresentedKey,
    base: ApiBase,
    video_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id_after_key(&ctx, &key, &video_id).await?;
    let view = app::videos::get_video_with_key(&ctx, &key.0, id).await?;
    Ok(HttpResponse::Ok().json(VideoDto::new(view, &base.0)))
}

/// The caller's videos, newest first, keyset-paginated.
#[utoipa::path(
    get,
    path = "/v1/videos",
    tag = "videos",
    operation_id = "list_videos",
    security(("api_key" = [])),
    params(ListVideosQuery),
    responses(
        (status = 200, description = "A page of videos.", body = VideoListDto),
        KeyErrors,
    ),
)]
pub async fn list(
    ctx: web::Data<AppContext>,
    caller: Caller,
    base: ApiBase,
    query: web::Query<ListVideosQuery>,
) -> Result<HttpResponse, ApiError> {
    let status = query
        .status
        .as_deref()
        .map(|s| {
            s.parse::<VideoStatus>().map_err(|_| {
                ApiError::bad_request("status must be one of queued, processing, ready, failed")
            })
        })
        .transpose()?;
    let cursor = query
        .cursor
        .as_deref()
        .map(|c| {
            c.parse::<VideoId>()
                .map_err(|_| ApiError::bad_request("cursor is not a cursor this API issued"))
        })
        .transpose()?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let (videos, next) = app::videos::list_videos(&ctx, caller.0, status, limit, cursor).await?;
    Ok(HttpResponse::Ok().json(VideoListDto {
        videos: videos
            .into_iter()
            .map(|v| VideoDto::new(v, &base.0))
            .collect(),
        next_cursor: next.map(|id| id.to_string()),
    }))
}

/// Deletes a video, its rows and its objects: `204`.
#[utoipa::path(
    delete,
    path = "/v1/videos/{video_id}",
    tag = "videos",
    operation_id = "delete_video",
    security(("api_key" = [])),
    params(("video_id" = String, Path, format = Uuid, description = "The video.")),
    responses(
        (status = 204, description = "Deleted, with its objects."),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
pub async fn delete(
    ctx: web::Data<AppContext>,
    caller: Caller,
    video_id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    app::videos::delete_video(&ctx, caller.0, path_id(&video_id)?).await?;
    Ok(HttpResponse::NoContent().finish())
}
