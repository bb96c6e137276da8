//! `GET /v1/videos/{id}/hls.m3u8` and `GET /v1/videos/{id}/hls/{rendition}.m3u8`: a ready
//! video's HLS playlists for players, authorized by the playback token in the query (players
//! cannot send an API key), with every segment URI presigned.

use actix_web::http::header::{CacheControl, CacheDirective};
use actix_web::{FromRequest, HttpRequest, HttpResponse, dev::Payload, web};
use serde::Deserialize;

use super::path_id;
use crate::app::{self, AppContext};
use crate::http::error::ApiError;

/// The media type of an HLS playlist (RFC 8216).
const MPEGURL: &str = "application/vnd.apple.mpegurl";

/// `?token=` of a playlist URL.
#[derive(Debug, Deserialize)]
pub struct PlaybackQuery {
    /// The playback token from `hls_url`.
    pub token: Option<String>,
}

/// `scheme://host` the client reached the API at (a reverse proxy's `Forwarded` or
/// `X-Forwarded-Proto`/`-Host` headers win over the socket's), to make vidq's own playback
/// URLs absolute: the address that answered this request is one this client can reach.
#[derive(Clone, Debug)]
pub struct ApiBase(pub String);

impl FromRequest for ApiBase {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let info = req.connection_info();
        std::future::ready(Ok(Self(format!("{}://{}", info.scheme(), info.host()))))
    }
}

/// The top playlist: a ladder's master (its variants point back here) or the only media
/// playlist.
pub async fn top_playlist(
    ctx: web::Data<AppContext>,
    video_id: web::Path<String>,
    query: web::Query<PlaybackQuery>,
) -> Result<HttpResponse, ApiError> {
    let video = path_id(&video_id)?;
    let text = app::playback::playlist(&ctx, video, None, query.token.as_deref()).await?;
    Ok(playlist_response(text))
}

/// One rendition's media playlist of a ladder.
pub async fn rendition_playlist(
    ctx: web::Data<AppContext>,
    path: web::Path<(String, String)>,
    query: web::Query<PlaybackQuery>,
) -> Result<HttpResponse, ApiError> {
    let (video_id, rendition) = path.into_inner();
    let video = path_id(&video_id)?;
    let text =
        app::playback::playlist(&ctx, video, Some(&rendition), query.token.as_deref()).await?;
    Ok(playlist_response(text))
}

fn playlist_response(text: String) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(MPEGURL)
        // Private: the body holds signed URLs, which a shared cache must not hand to others.
        .insert_header(CacheControl(vec![
            CacheDirective::Private,
            CacheDirective::MaxAge(app::playback::PLAYLIST_MAX_AGE.as_secs() as u32),
        ]))
        .body(text)
}
