//! The upload page at `/`: a web developer's first look at vidq in a browser. It takes an
//! API key, uploads by drag and drop with tus-js-client (resuming after a reload), follows
//! the video through the event feed's long poll, plays it with hls.js, lists the caller's
//! videos and starts a live broadcast. It is plain HTML and JavaScript calling the public
//! `/v1` API with the key typed in, nothing a client app could not do itself; the
//! JavaScript it uses is vendored at pinned versions (`vendor/`, made and checked by
//! `scripts/vendor_page_js.sh`) and served from the binary, never from a CDN.

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, web};

use crate::app::AppContext;

/// The page's scripts load only from this origin; segments and thumbnails come from the
/// bucket (another origin), and hls.js plays through `blob:` URLs.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src *; img-src * data: blob:; media-src * blob:; \
     worker-src blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// Where the page's HTML carries a key to fill in (`vidq dev` only).
const KEY_SLOT: &str = "<meta name=\"vidq-key\" content=\"\">";

/// Registers `/` and `/ui/...`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use web::{get, resource};
    let asset = |path: &'static str, content_type: &'static str, body: &'static [u8]| {
        resource(path).route(get().to(move || async move { served(content_type, body) }))
    };
    cfg.service(resource("/").route(get().to(page)))
        .service(asset(
            "/ui/page.js",
            "text/javascript; charset=utf-8",
            include_bytes!("page.js"),
        ))
        .service(asset(
            "/ui/page.css",
            "text/css; charset=utf-8",
            include_bytes!("page.css"),
        ))
        .service(asset(
            "/ui/vendor/tus.min.js",
            "text/javascript; charset=utf-8",
            include_bytes!("vendor/tus.min.js"),
        ))
        .service(asset(
            "/ui/vendor/hls.light.min.js",
            "text/javascript; charset=utf-8",
            include_bytes!("vendor/hls.light.min.js"),
        ))
        .service(asset(
            "/ui/vendor/LICENSES.txt",
            "text/plain; charset=utf-8",
            include_bytes!("vendor/LICENSES.txt"),
        ));
}

/// The page, with the key of this `vidq dev` run filled in when there is one.
async fn page(ctx: web::Data<AppContext>) -> HttpResponse {
    let html = include_str!("index.html");
    let body = match &ctx.page_key {
        Some(key) => html.replace(
            KEY_SLOT,
            &format!(
                "<meta name=\"vidq-key\" content=\"{}\">",
                attribute_text(key)
            ),
        ),
        None => html.to_owned(),
    };
    let mut answer = served("text/html; charset=utf-8", body.into_bytes());
    // The page may carry a key: never cached.
    answer
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    answer
}

fn served(
    content_type: &'static str,
    body: impl actix_web::body::MessageBody + 'static,
) -> HttpResponse {
    let mut answer = HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "public, max-age=300"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "same-origin"))
        .body(body);
    if content_type.starts_with("text/html") {
        answer.headers_mut().insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        );
    }
    answer
}

/// `text` as an HTML attribute value (between double quotes).
fn attribute_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_has_the_slot_a_key_is_filled_into() {
        assert!(include_str!("index.html").contains(KEY_SLOT));
    }

    #[test]
    fn a_filled_in_key_cannot_leave_its_attribute() {
        assert_eq!(attribute_text("a\"><script>"), "a&quot;&gt;&lt;script&gt;");
    }
}
