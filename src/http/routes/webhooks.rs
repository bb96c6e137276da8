//! `/v1/webhooks`: register, list, show, delete, rotate the secret, resend an event, and read
//! the delivery log.

use actix_web::{HttpResponse, web};

use super::path_id;
use crate::app::{self, AppContext};
use crate::http::auth::Caller;
use crate::http::dto::{
    CreateWebhookRequest, DeliveriesQuery, DeliveryListDto, ResendDto, WebhookDto, WebhookListDto,
};
use crate::http::error::ApiError;
use crate::http::json::JsonBody;

/// Registers an endpoint: `201` with the secret (shown only here and on rotation).
pub async fn create(
    ctx: web::Data<AppContext>,
    caller: Caller,
    body: JsonBody<CreateWebhookRequest>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    let (row, secret) = app::webhooks::create(&ctx, caller.0, &body.url, body.event_types).await?;
    let mut dto = WebhookDto::from(row);
    dto.secret = Some(secret.expose().to_owned());
    Ok(HttpResponse::Created().json(dto))
}

/// The caller's endpoints.
pub async fn list(ctx: web::Data<AppContext>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let rows = app::webhooks::list(&ctx, caller.0).await?;
    Ok(HttpResponse::Ok().json(WebhookListDto {
        webhooks: rows.into_iter().map(WebhookDto::from).collect(),
    }))
}

/// One endpoint.
pub async fn get(
    ctx: web::Data<AppContext>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let row = app::webhooks::get(&ctx, caller.0, path_id(&id)?).await?;
    Ok(HttpResponse::Ok().json(WebhookDto::from(row)))
}

/// Deletes an endpoint: `204`.
pub async fn delete(
    ctx: web::Data<AppContext>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    app::webhooks::delete(&ctx, caller.0, path_id(&id)?).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// New secret; the old one keeps signing for 24 hours.
pub async fn rotate_secret(
    ctx: web::Data<AppContext>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (row, secret, old_until) =
        app::webhooks::rotate_secret(&ctx, caller.0, path_id(&id)?).await?;
    let mut dto = WebhookDto::from(row);
    dto.secret = Some(secret.expose().to_owned());
    dto.previous_secret_expires_at = Some(old_until);
    Ok(HttpResponse::Ok().json(dto))
}

/// Sends one event to the endpoint again, with the same id: `202`.
pub async fn resend(
    ctx: web::Data<AppContext>,
    caller: Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (id, event) = path.into_inner();
    let delivery_id =
        app::webhooks::resend(&ctx, caller.0, path_id(&id)?, path_id(&event)?).await?;
    Ok(HttpResponse::Accepted().json(ResendDto { delivery_id }))
}

/// The endpoint's newest deliveries with every try.
pub async fn deliveries(
    ctx: web::Data<AppContext>,
    caller: Caller,
    id: web::Path<String>,
    query: web::Query<DeliveriesQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = query.limit.unwrap_or(20);
    let deliveries = app::webhooks::deliveries(&ctx, caller.0, path_id(&id)?, limit).await?;
    Ok(HttpResponse::Ok().json(DeliveryListDto::from(deliveries)))
}
