//! The `Authorization: Bearer <key>` extractor every `/v1` route takes.

use std::future::Future;
use std::pin::Pin;

use actix_web::{FromRequest, HttpRequest, dev::Payload, http::header, web};

use super::error::ApiError;
use crate::app::{self, AppContext};
use crate::domain::ids::UserId;

/// The authenticated caller.
#[derive(Clone, Copy, Debug)]
pub struct Caller(pub UserId);

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let ctx = req.app_data::<web::Data<AppContext>>().cloned();
        let key = PresentedKey::from_headers(req);
        Box::pin(async move {
            let (Some(ctx), PresentedKey(key)) = (ctx, key?) else {
                return Err(ApiError::unauthorized());
            };
            Ok(Caller(app::auth::authenticate(&ctx.db, &key).await?))
        })
    }
}

/// The API key a request presents, not yet looked up: for a handler that looks it up in the
/// same statement as what it reads (`GET /v1/videos/{id}`).
#[derive(Clone, Debug)]
pub struct PresentedKey(pub String);

impl PresentedKey {
    /// The bearer key of `req`; 401 without one, 400 with two.
    fn from_headers(req: &HttpRequest) -> Result<Self, ApiError> {
        // Two keys are ambiguous: proxies and frameworks disagree on which one counts, so
        // neither is trusted.
        if req
            .headers()
            .get_all(header::AUTHORIZATION)
            .nth(1)
            .is_some()
        {
            return Err(ApiError::bad_request(
                "send one Authorization header, not several",
            ));
        }
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| {
                let (scheme, key) = value.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then(|| Self(key.trim().to_owned()))
            })
            .ok_or_else(ApiError::unauthorized)
    }
}

impl FromRequest for PresentedKey {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        std::future::ready(Self::from_headers(req))
    }
}
