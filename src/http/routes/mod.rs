//! Route table: `/healthz`, `/readyz`, `/openapi.json`, and the `/v1` API (authenticated by API key, except
//! the HLS playlists, which a playback token in the URL authorizes).

pub mod events;
pub mod health;
pub mod live;
pub mod metrics;
pub mod playback;
pub mod tus;
pub mod uploads;
pub mod videos;
pub mod webhooks;

use actix_web::web;

/// Registers every route. Each path is one resource carrying all its methods, so a known
/// path called with another method answers 405 with `Allow`, not 404.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use web::{delete, get, head, patch, post, put, resource};
    let tus_options = || web::route().method(actix_web::http::Method::OPTIONS);
    cfg.service(resource("/openapi.json").route(get().to(super::openapi::openapi_json)));
    cfg.service(
        resource("/healthz")
            .route(get().to(health::healthz))
            .route(head().to(health::healthz)),
    )
    .service(
        resource("/readyz")
            .route(get().to(health::readyz))
            .route(head().to(health::readyz)),
    )
    .service(resource("/metrics").route(get().to(metrics::metrics)))
    .service(
        web::scope("/v1")
            .service(resource("/uploads").route(post().to(uploads::create)))
            .service(resource("/uploads/{upload_id}").route(get().to(uploads::status)))
            .service(resource("/uploads/{upload_id}/content").route(put().to(uploads::put_content)))
            .service(resource("/uploads/{upload_id}/confirm").route(post().to(uploads::confirm)))
            .service(
                web::scope("/tus")
                    .wrap(actix_web::middleware::from_fn(tus::protocol))
                    .service(
                        resource(["", "/"])
                            .route(tus_options().to(tus::options))
                            .route(post().to(tus::create)),
                    )
                    .service(
                        resource("/{upload_id}")
                            .route(tus_options().to(tus::options_upload))
                            .route(head().to(tus::head))
                            .route(patch().to(tus::patch))
                            .route(delete().to(tus::terminate))
                            .route(post().to(tus::overridden)),
                    ),
            )
            .service(resource("/live").route(post().to(live::create)))
            .service(resource("/live/{id}").route(get().to(live::get)))
            .service(resource("/live/{id}/end").route(post().to(live::end)))
            .service(resource("/live/{id}/playlist.m3u8").route(get().to(live::playlist)))
            .service(resource("/videos").route(get().to(videos::list)))
            .service(
                resource("/videos/{video_id}")
                    .route(get().to(videos::get))
                    .route(delete().to(videos::delete)),
            )
            .service(
                resource("/videos/{video_id}/hls.m3u8").route(get().to(playback::top_playlist)),
            )
            .service(
                resource("/videos/{video_id}/hls/{rendition}.m3u8")
                    .route(get().to(playback::rendition_playlist)),
            )
            .service(resource("/events").route(get().to(events::list)))
            .service(
                resource("/webhooks")
                    .route(post().to(webhooks::create))
                    .route(get().to(webhooks::list)),
            )
            .service(
                resource("/webhooks/{id}")
                    .route(get().to(webhooks::get))
                    .route(delete().to(webhooks::delete)),
            )
            .service(
                resource("/webhooks/{id}/rotate-secret").route(post().to(webhooks::rotate_secret)),
            )
            .service(
                resource("/webhooks/{id}/resend/{event_id}").route(post().to(webhooks::resend)),
            )
            .service(resource("/webhooks/{id}/deliveries").route(get().to(webhooks::deliveries))),
    );
}

/// Parses an id from the path. A malformed id names no resource: `404`, like an unknown one.
fn path_id<T: std::str::FromStr>(raw: &str) -> Result<T, super::error::ApiError> {
    raw.parse().map_err(|_| super::error::ApiError::not_found())
}

/// [`path_id`] for a route that looks its key up in the same statement as what it reads: a
/// malformed id never gets that far, so it is answered like on any other route, after the
/// key is checked (`401` for a bad key, then `404`).
async fn path_id_after_key<T: std::str::FromStr>(
    ctx: &crate::app::AppContext,
    key: &super::auth::PresentedKey,
    raw: &str,
) -> Result<T, super::error::ApiError> {
    match path_id(raw) {
        Ok(id) => Ok(id),
        Err(malformed) => {
            crate::app::auth::authenticate(&ctx.db, &key.0).await?;
            Err(malformed)
        }
    }
}
