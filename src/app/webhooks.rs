//! Webhook endpoints: register (URL checked against the destination policy, secret minted),
//! list, delete, rotate the secret, resend one event, read the delivery log.

use std::time::Duration;

use chrono::Utc;

use super::{AppContext, AppError};
use crate::db::{self, deliveries::AttemptRow, deliveries::DeliveryRow, webhooks::EndpointRow};
use crate::domain::ids::{EventId, UserId, WebhookId};
use crate::domain::signature::WebhookSecret;

/// How long the old secret keeps signing after a rotation.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// Most deliveries the log shows at once.
pub const MAX_LOG: i64 = 100;

/// Most endpoints one uploader may register: each event is POSTed once per endpoint, so this
/// bounds how many requests one event can make vidq send.
pub const MAX_ENDPOINTS: i64 = 20;

/// How long a registration waits for DNS.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Registers an endpoint for `owner`; the secret is returned once, here.
pub async fn create(
    ctx: &AppContext,
    owner: UserId,
    url: &str,
    event_types: Option<Vec<String>>,
) -> Result<(EndpointRow, WebhookSecret), AppError> {
    let parsed = crate::domain::destination::parse_url(url)?;
    if let Some(types) = &event_types {
        crate::domain::event::check_event_types(types)?;
    }
    let host = parsed.host_str().unwrap_or_default().to_owned();
    tokio::time::timeout(
        RESOLVE_TIMEOUT,
        crate::adapters::destination::resolve(&parsed, ctx.webhooks.allow_private),
    )
    .await
    .map_err(|_| crate::domain::destination::DestinationError::Unresolvable(host))??;
    let secret = WebhookSecret::generate();
    let mut conn = ctx.db.get().await?;
    if db::webhooks::count(&mut conn, owner.0).await? >= MAX_ENDPOINTS {
        return Err(AppError::BadRequest(format!(
            "an uploader can register at most {MAX_ENDPOINTS} webhooks; delete one first"
        )));
    }
    let row = db::webhooks::insert(
        &mut conn,
        WebhookId::new().0,
        owner.0,
        parsed.as_str(),
        event_types,
        secret.expose(),
    )
    .await?;
    tracing::info!(endpoint = %row.id, url = %row.url, "webhook registered");
    Ok((row, secret))
}

/// The owner's endpoints.
pub async fn list(ctx: &AppContext, owner: UserId) -> Result<Vec<EndpointRow>, AppError> {
    let mut conn = ctx.db.get().await?;
    Ok(db::webhooks::list(&mut conn, owner.0).await?)
}

/// One endpoint.
pub async fn get(ctx: &AppContext, owner: UserId, id: WebhookId) -> Result<EndpointRow, AppError> {
    let mut conn = ctx.db.get().await?;
    db::webhooks::find(&mut conn, owner.0, id.0)
        .await?
        .ok_or(AppError::NotFound)
}

/// Deletes an endpoint; nothing more is sent to it.
pub async fn delete(ctx: &AppContext, owner: UserId, id: WebhookId) -> Result<(), AppError> {
    let mut conn = ctx.db.get().await?;
    match db::webhooks::delete(&mut conn, owner.0, id.0).await? {
        0 => Err(AppError::NotFound),
        _ => Ok(()),
    }
}

/// Mints a new secret; the old one keeps signing for [`ROTATION_OVERLAP`].
pub async fn rotate_secret(
    ctx: &AppContext,
    owner: UserId,
    id: WebhookId,
) -> Result<(EndpointRow, WebhookSecret, chrono::DateTime<Utc>), AppError> {
    let secret = WebhookSecret::generate();
    let old_expires_at = Utc::now() + ROTATION_OVERLAP;
    let mut conn = ctx.db.get().await?;
    let row = db::webhooks::rotate(&mut conn, owner.0, id.0, secret.expose(), old_expires_at)
        .await?
        .ok_or(AppError::NotFound)?;
    tracing::info!(endpoint = %row.id, "webhook secret rotated");
    Ok((row, secret, old_expires_at))
}

/// Queues one more delivery of an event to an endpoint, with the same event id.
pub async fn resend(
    ctx: &AppContext,
    owner: UserId,
    id: WebhookId,
    event: EventId,
) -> Result<i64, AppError> {
    let mut conn = ctx.db.get().await?;
    if let Some(delivery) = db::deliveries::resend(&mut conn, owner.0, id.0, event.0).await? {
        return Ok(delivery);
    }
    // Say why: a disabled endpoint is a conflict; anything else names nothing of the caller's.
    match db::webhooks::find(&mut conn, owner.0, id.0).await? {
        Some(EndpointRow {
            disabled_at: Some(_),
            disabled_reason,
            ..
        }) => Err(AppError::EndpointDisabled(
            disabled_reason.unwrap_or_else(|| "disabled".into()),
        )),
        _ => Err(AppError::NotFound),
    }
}

/// The endpoint's newest deliveries with every logged try.
pub async fn deliveries(
    ctx: &AppContext,
    owner: UserId,
    id: WebhookId,
    limit: i64,
) -> Result<(Vec<DeliveryRow>, Vec<AttemptRow>), AppError> {
    if !(1..=MAX_LOG).contains(&limit) {
        return Err(AppError::BadRequest(format!(
            "limit must be between 1 and {MAX_LOG}"
        )));
    }
    let mut conn = ctx.db.get().await?;
    if db::webhooks::find(&mut conn, owner.0, id.0)
        .await?
        .is_none()
    {
        return Err(AppError::NotFound);
    }
    Ok(db::deliveries::of_endpoint(&mut conn, id.0, limit).await?)
}
