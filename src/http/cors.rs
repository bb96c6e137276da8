//! CORS for `/v1`, so a page in a browser (tus-js-client, a plain `fetch`) can upload and
//! read: preflights are answered here, before authentication (a browser never sends the
//! API key on a preflight), and answers to allowed origins expose the headers a tus client
//! reads (`Location`, `Upload-*`, `Tus-*`). Credentials are never allowed: the API key
//! travels in `Authorization`, which the page sets itself.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, ResponseError};

use super::error::ApiError;
use crate::config::CorsOrigins;

const ALLOW_METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
const EXPOSE_HEADERS: &str = "Location, Upload-Offset, Upload-Length, Upload-Expires, \
     Upload-Metadata, Tus-Resumable, Tus-Version, Tus-Extension, Tus-Max-Size, \
     Tus-Checksum-Algorithm, Retry-After, Allow";
/// Browsers cache a preflight this long (seconds).
const MAX_AGE: &str = "86400";

/// Middleware: answers preflights to `/v1` and marks answers to allowed origins.
pub async fn cors(
    origins: CorsOrigins,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_owned);
    let in_scope = req.path().starts_with("/v1/") || req.path() == "/v1";
    let Some(origin) = origin.filter(|_| in_scope) else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    let allowed = origins.allows(&origin);
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let answer = if allowed {
            let mut answer = HttpResponse::NoContent();
            answer
                .insert_header((header::ACCESS_CONTROL_ALLOW_METHODS, ALLOW_METHODS))
                .insert_header((header::ACCESS_CONTROL_MAX_AGE, MAX_AGE));
            if let Some(asked) = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
                answer.insert_header((header::ACCESS_CONTROL_ALLOW_HEADERS, asked.clone()));
            }
            let mut answer = answer.finish();
            allow(answer.headers_mut(), &origins, &origin);
            answer
        } else {
            ApiError::forbidden_origin(&origin).error_response()
        };
        return Ok(req.into_response(answer).map_into_right_body());
    }
    let mut res = next.call(req).await?;
    if allowed {
        allow(res.headers_mut(), &origins, &origin);
        res.headers_mut().insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSE_HEADERS),
        );
    }
    Ok(res.map_into_left_body())
}

fn allow(headers: &mut HeaderMap, origins: &CorsOrigins, origin: &str) {
    let value = match origins {
        CorsOrigins::Any => HeaderValue::from_static("*"),
        CorsOrigins::Listed(_) => match HeaderValue::from_str(origin) {
            Ok(value) => value,
            Err(_) => return,
        },
    };
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    // The answer differs by origin when origins are listed: caches must keep them apart.
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}
