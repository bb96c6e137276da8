//! `GET /v1/videos/{id}/hls.m3u8` and `GET /v1/videos/{id}/hls/{rendition}.m3u8`: a ready
//! video's HLS playlists for players, authorized by the playback token in the query (players
//! cannot send an API key), with every segment URI presigned.

use actix_web::http::header::{CacheControl, CacheDirective};
use actix_web::{FromRequest, HttpRequest, HttpResponse, dev::Payload, web};
use serde::Deserialize;
use utoipa::IntoParams;

use super::path_id;
use crate::app::{self, AppContext};
use crate::http::error::ApiError;
use crate::http::openapi::{BadRequest, Forbidden, NotFound, TooManyRequests, Unavailable};

/// The media type of an HLS playlist (RFC 8216).
const MPEGURL: &str = "application/vnd.apple.mpegurl";

/// `?token=` of a playlist URL.
#[derive(Debug, Deserialize, IntoParams)]
pub struct PlaybackQuery {
    /// The playback token from `hls_url`. The document declares it as the
    /// `playback_token` security scheme, not as a parameter: it is a credential.
    #[param(ignore)]
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
        std::future::ready(api_base(info.scheme(), info.host()).ok_or_else(|| {
            ApiError::bad_request(
                "the Host or forwarding headers do not name an http(s) address vidq can point back to",
            )
        }))
    }
}

/// `scheme://host` when the scheme is http(s) and the host is a bare authority (a name or
/// address and a port): any client may send these headers, and what it sends must not turn
/// into another scheme, a path or a query in the URLs vidq hands back.
fn api_base(scheme: &str, host: &str) -> Option<ApiBase> {
    if !matches!(scheme, "http" | "https") {
        return None;
    }
    let base = format!("{scheme}://{host}");
    let url = url::Url::parse(&base).ok()?;
    let bare = url.host_str().is_some()
        && url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && !host.contains(['/', '?', '#', '@', '\\']);
    bare.then_some(ApiBase(base))
}

/// The top playlist: a ladder's master (its variants point back here) or the only media
/// playlist.
#[utoipa::path(
    get,
    path = "/v1/videos/{video_id}/hls.m3u8",
    tag = "videos",
    operation_id = "video_playlist",
    security(("playback_token" = [])),
    params(("video_id" = String, Path, format = Uuid, description = "The video.")),
    responses(
        (status = 200, description = "The HLS playlist, every URI in it presigned or \
            pointing back here with the same token.", body = String,
            content_type = "application/vnd.apple.mpegurl"),
        (status = 400, response = BadRequest),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        (status = 429, response = TooManyRequests),
        (status = 503, response = Unavailable),
    ),
)]
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
#[utoipa::path(
    get,
    path = "/v1/videos/{video_id}/hls/{rendition}.m3u8",
    tag = "videos",
    operation_id = "rendition_playlist",
    security(("playback_token" = [])),
    params(
        ("video_id" = String, Path, format = Uuid, description = "The video."),
        ("rendition" = String, Path, pattern = "^[A-Za-z0-9_-]{1,16}$",
            description = "A rendition of the video's ladder, as its master playlist names it."),
    ),
    responses(
        (status = 200, description = "The rendition's media playlist, every URI in it \
            presigned.", body = String, content_type = "application/vnd.apple.mpegurl"),
        (status = 400, response = BadRequest),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        (status = 429, response = TooManyRequests),
        (status = 503, response = Unavailable),
    ),
)]
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

#[cfg(test)]
mod tests {
    use super::api_base;

    #[test]
    fn only_an_http_scheme_and_a_bare_authority_make_a_base() {
        assert_eq!(
            api_base("https", "media.example.com:8443").map(|b| b.0),
            Some("https://media.example.com:8443".to_owned())
        );
        assert!(api_base("http", "[::1]:8080").is_some());
        assert!(api_base("javascript", "localhost:8080").is_none());
        assert!(api_base("http", "a/b?c#d").is_none());
        assert!(api_base("http", "user@evil.example").is_none());
        assert!(api_base("http", "").is_none());
    }
}
