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
use crate::http::openapi::{
    Conflict, KeyErrors, NotFound, RequestTimeout, TooLarge, Unprocessable, UnsupportedMediaType,
};

/// Registers an endpoint: `201` with the secret (shown only here and on rotation).
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    tag = "webhooks",
    operation_id = "create_webhook",
    security(("api_key" = [])),
    request_body = CreateWebhookRequest,
    responses(
        (status = 201, description = "The endpoint, with its `secret`.", body = WebhookDto),
        (status = 408, response = RequestTimeout),
        (status = 413, response = TooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 422, response = Unprocessable),
        KeyErrors,
    ),
)]
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
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "webhooks",
    operation_id = "list_webhooks",
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The caller's endpoints.", body = WebhookListDto),
        KeyErrors,
    ),
)]
pub async fn list(ctx: web::Data<AppContext>, caller: Caller) -> Result<HttpResponse, ApiError> {
    let rows = app::webhooks::list(&ctx, caller.0).await?;
    Ok(HttpResponse::Ok().json(WebhookListDto {
        webhooks: rows.into_iter().map(WebhookDto::from).collect(),
    }))
}

/// One endpoint.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    operation_id = "get_webhook",
    security(("api_key" = [])),
    params(("id" = String, Path, format = Uuid, description = "The endpoint.")),
    responses(
        (status = 200, description = "The endpoint.", body = WebhookDto),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
pub async fn get(
    ctx: web::Data<AppContext>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let row = app::webhooks::get(&ctx, caller.0, path_id(&id)?).await?;
    Ok(HttpResponse::Ok().json(WebhookDto::from(row)))
}

/// Deletes an endpoint: `204`.
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    operation_id = "delete_webhook",
    security(("api_key" = [])),
    params(("id" = String, Path, format = Uuid, description = "The endpoint.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
pub async fn delete(
    ctx: web::Data<AppContext>,
    caller: Caller,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    app::webhooks::delete(&ctx, caller.0, path_id(&id)?).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// New secret; the old one keeps signing for 24 hours.
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/rotate-secret",
    tag = "webhooks",
    operation_id = "rotate_webhook_secret",
    security(("api_key" = [])),
    params(("id" = String, Path, format = Uuid, description = "The endpoint.")),
    responses(
        (status = 200, description = "The endpoint with its new `secret` and until when the \
            old one still signs.", body = WebhookDto),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
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
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/resend/{event_id}",
    tag = "webhooks",
    operation_id = "resend_event",
    security(("api_key" = [])),
    params(("id" = String, Path, format = Uuid, description = "The endpoint."),
        ("event_id" = String, Path, format = Uuid, description = "The event.")),
    responses(
        (status = 202, description = "A new delivery of the event is queued.", body = ResendDto),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 422, response = Unprocessable),
        KeyErrors,
    ),
)]
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
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}/deliveries",
    tag = "webhooks",
    operation_id = "list_deliveries",
    security(("api_key" = [])),
    params(
        ("id" = String, Path, format = Uuid, description = "The endpoint."),
        DeliveriesQuery,
    ),
    responses(
        (status = 200, description = "The newest deliveries, newest first.", body = DeliveryListDto),
        (status = 404, response = NotFound),
        KeyErrors,
    ),
)]
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
