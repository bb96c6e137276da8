//! Live recordings: `POST /v1/live`, `GET /v1/live/{id}`, `POST /v1/live/{id}/end`. The
//! files themselves go to the ingest listener (`http::ingest_server`), whose URL the
//! recording's `ingest_url` names (its stream key authorizes it: FFmpeg's `-method PUT`
//! sends no API key), or over RTMP (`rtmp_url`, the stream key as the stream name) to the
//! RTMP listener (`crate::rtmp`).

use actix_web::http::header::{CacheControl, CacheDirective};
use actix_web::{HttpResponse, web};

use super::path_id;
use super::playback::{ApiBase, PlaybackQuery};
use crate::app::{self, AppContext};
use crate::domain::ids::RecordingId;
use crate::http::auth::Caller;
use crate::http::dto::RecordingDto;
use crate::http::error::ApiError;
use crate::http::openapi::{
    BadRequest, Forbidden, KeyErrors, NotFound, TooManyRequests, Unavailable,
};

/// `201` with the recording and its ingest URL (shown once: it holds the stream key).
#[utoipa::path(
    post,
    path = "/v1/live",
    tag = "live",
    operation_id = "create_live",
    security(("api_key" = [])),
    responses(
        (status = 201, description = "The recording, with its `ingest_url`, `stream_key` and `rtmp_url` (shown only here).", body = RecordingDto),
        KeyErrors,
    ),
)]
pub async fn create(
    ctx: web::Data<AppContext>,
    caller: Caller,
    base: ApiBase,
) -> Result<HttpResponse, ApiError> {
    let created = app::live::create(&ctx, caller.0).await?;
    let ingest_base = ctx
        .ingest
        .as_ref()
        .map(|i| i.ingest_base(&base.0))
        .unwrap_or_default();
    let rtmp_url = ctx.ingest.as_ref().and_then(|i| i.rtmp_url(&base.0));
    let ingest_url = format!(
        "{ingest_base}{}{}/",
        crate::http::ingest_server::PREFIX,
        created.stream_key
    );
    let status = app::live::status(&ctx, caller.0, created.row.id).await?;
    let playback = playback_url(&ctx, &base, created.row.id);
    Ok(HttpResponse::Created().json(
        RecordingDto::new(status, Some(ingest_url), playback)
            .with_stream_key(created.stream_key, rtmp_url),
    ))
}

/// The recording's state and counts.
#[utoipa::path(
    get,
    path = "/v1/live/{id}",
    tag = "live",
    operation_id = "get_live",
    security(("api_key" = [])),
    params(("id" = String, Path, format = Uuid, description = "The recording.")),
    responses(
        (status = 200, description = "The recording.", body = RecordingDto),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
pub async fn get(
    ctx: web::Data<AppContext>,
    caller: Caller,
    base: ApiBase,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&id)?;
    let status = app::live::status(&ctx, caller.0, id).await?;
    let playback = playback_url(&ctx, &base, id);
    Ok(HttpResponse::Ok().json(RecordingDto::new(status, None, playback)))
}

/// The live playlist (no API key: its token authorizes the player). Never cached: it
/// grows while the broadcast goes on.
#[utoipa::path(
    get,
    path = "/v1/live/{id}/playlist.m3u8",
    tag = "live",
    operation_id = "live_playlist",
    security(("playback_token" = [])),
    params(("id" = String, Path, format = Uuid, description = "The recording.")),
    responses(
        (status = 200, description = "The HLS EVENT playlist of the segments in S3 so far; \
            `#EXT-X-ENDLIST` once it has ended and is all there.", body = String,
            content_type = "application/vnd.apple.mpegurl"),
        (status = 400, response = BadRequest),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        (status = 429, response = TooManyRequests),
        (status = 503, response = Unavailable),
    ),
)]
pub async fn playlist(
    ctx: web::Data<AppContext>,
    id: web::Path<String>,
    query: web::Query<PlaybackQuery>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&id)?;
    let text = app::live::playlist(&ctx, id, query.token.as_deref()).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/vnd.apple.mpegurl")
        .insert_header(CacheControl(vec![
            CacheDirective::Private,
            CacheDirective::NoCache,
        ]))
        .body(text))
}

fn playback_url(ctx: &AppContext, base: &ApiBase, id: RecordingId) -> String {
    format!("{}{}", base.0, app::live::playback_path(ctx, id))
}

/// Ends the recording (files until the cutoff still count): `202` with its state.
#[utoipa::path(
    post,
    path = "/v1/live/{id}/end",
    tag = "live",
    operation_id = "end_live",
    security(("api_key" = [])),
    params(("id" = String, Path, format = Uuid, description = "The recording.")),
    responses(
        (status = 202, description = "Ending (or ended before): the recording.", body = RecordingDto),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
pub async fn end(
    ctx: web::Data<AppContext>,
    caller: Caller,
    base: ApiBase,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id(&id)?;
    app::live::end(&ctx, caller.0, id).await?;
    let status = app::live::status(&ctx, caller.0, id).await?;
    let playback = playback_url(&ctx, &base, id);
    Ok(HttpResponse::Accepted().json(RecordingDto::new(status, None, playback)))
}
