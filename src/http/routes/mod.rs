//! Route table: `/healthz`, `/readyz`, and the `/v1` API (authenticated by API key, except
//! the HLS playlists, which a playback token in the URL authorizes).

pub mod events;
pub mod health;
pub mod playback;
pub mod uploads;
pub mod videos;
pub mod webhooks;

use actix_web::web;

/// Registers every route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .service(
            web::scope("/v1")
                .route("/uploads", web::post().to(uploads::create))
                .route(
                    "/uploads/{upload_id}/confirm",
                    web::post().to(uploads::confirm),
                )
                .route("/videos", web::get().to(videos::list))
                .route("/videos/{video_id}", web::get().to(videos::get))
                .route("/videos/{video_id}", web::delete().to(videos::delete))
                .route(
                    "/videos/{video_id}/hls.m3u8",
                    web::get().to(playback::top_playlist),
                )
                .route(
                    "/videos/{video_id}/hls/{rendition}.m3u8",
                    web::get().to(playback::rendition_playlist),
                )
                .route("/events", web::get().to(events::list))
                .route("/webhooks", web::post().to(webhooks::create))
                .route("/webhooks", web::get().to(webhooks::list))
                .route("/webhooks/{id}", web::get().to(webhooks::get))
                .route("/webhooks/{id}", web::delete().to(webhooks::delete))
                .route(
                    "/webhooks/{id}/rotate-secret",
                    web::post().to(webhooks::rotate_secret),
                )
                .route(
                    "/webhooks/{id}/resend/{event_id}",
                    web::post().to(webhooks::resend),
                )
                .route(
                    "/webhooks/{id}/deliveries",
                    web::get().to(webhooks::deliveries),
                ),
        );
}

/// Parses an id from the path. A malformed id names no resource: `404`, like an unknown one.
fn path_id<T: std::str::FromStr>(raw: &str) -> Result<T, super::error::ApiError> {
    raw.parse().map_err(|_| super::error::ApiError::not_found())
}
