//! Webhook endpoints: register (URL checked against the destination policy, secret minted),
//! list, delete, rotate the secret, resend one event, read the delivery log.

use std::time::Duration;

use chrono::Utc;
use diesel_async::AsyncConnection;

use super::{AppContext, AppError};
use crate::app::WebhookError;
use crate::db::{
    self, DbError, deliveries::AttemptRow, deliveries::DeliveryRow, webhooks::EndpointRow,
};
use crate::domain::delivery::DeliveryStatus;
use crate::domain::ids::{EventId, UserId, WebhookId};
use crate::domain::signature::WebhookSecret;
use chrono::DateTime;
use uuid::Uuid;

/// How long the old secret keeps signing after a rotation.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// Most deliveries the log shows at once.
pub const MAX_LOG: i64 = 100;

/// Most endpoints one uploader may register: each event is POSTed once per endpoint, so this
/// bounds how many requests one event can make vidq send.
pub const MAX_ENDPOINTS: i64 = 20;

/// Most deliveries resends may add to one endpoint in a minute.
pub const MAX_RESENDS_PER_MINUTE: i64 = 60;

/// The window [`MAX_RESENDS_PER_MINUTE`] counts over; a refused resend is told to wait it.
pub const RESEND_WINDOW: Duration = Duration::from_secs(60);

/// How long a registration waits for DNS.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// An endpoint as its owner sees it (never the secrets). Built from the row field by field,
/// so a column change stops here instead of reaching the API.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Id.
    pub id: Uuid,
    /// Where events are POSTed.
    pub url: String,
    /// Types it receives; `None` is every type.
    pub event_types: Option<Vec<String>>,
    /// When a `410 Gone` turned it off.
    pub disabled_at: Option<DateTime<Utc>>,
    /// Why it was turned off.
    pub disabled_reason: Option<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
}

impl From<EndpointRow> for Endpoint {
    fn from(row: EndpointRow) -> Self {
        Self {
            id: row.id.0,
            url: row.url,
            event_types: row.event_types.map(|t| t.into_iter().flatten().collect()),
            disabled_at: row.disabled_at,
            disabled_reason: row.disabled_reason,
            created_at: row.created_at,
        }
    }
}

/// One finished try of a delivery.
#[derive(Debug, Clone)]
pub struct DeliveryTry {
    /// Try number.
    pub attempt: i32,
    /// Which relay made it.
    pub relay_id: String,
    /// Start.
    pub started_at: DateTime<Utc>,
    /// End.
    pub finished_at: DateTime<Utc>,
    /// The receiver's status code, if it answered.
    pub response_status: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
}

/// One delivery of an event to an endpoint, with its tries.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Delivery id.
    pub id: i64,
    /// The event.
    pub event_id: Uuid,
    /// Its type.
    pub event_type: String,
    /// Where the delivery stands.
    pub status: DeliveryStatus,
    /// Tries started.
    pub attempts: i32,
    /// When the next try is due, while pending.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// Every logged try, oldest first.
    pub tries: Vec<DeliveryTry>,
}

/// Joins deliveries (in their order) with their logged tries.
fn join_tries(rows: Vec<DeliveryRow>, attempts: Vec<AttemptRow>) -> Result<Vec<Delivery>, DbError> {
    let mut tries: std::collections::BTreeMap<i64, Vec<DeliveryTry>> = Default::default();
    for a in attempts {
        tries.entry(a.delivery_id).or_default().push(DeliveryTry {
            attempt: a.attempt,
            relay_id: a.relay_id,
            started_at: a.started_at,
            finished_at: a.finished_at,
            response_status: a.response_status,
            error: a.error,
        });
    }
    rows.into_iter()
        .map(|r| {
            let status = r.status;
            Ok(Delivery {
                tries: tries.remove(&r.id).unwrap_or_default(),
                next_attempt_at: (status == DeliveryStatus::Pending).then_some(r.next_attempt_at),
                id: r.id,
                event_id: r.event_id,
                event_type: r.event_type,
                status,
                attempts: r.attempt_count,
                last_error: r.last_error,
                delivered_at: r.delivered_at,
            })
        })
        .collect()
}

/// Registers an endpoint for `owner`; the secret is returned once, here.
pub async fn create(
    ctx: &AppContext,
    owner: UserId,
    url: &str,
    event_types: Option<Vec<String>>,
) -> Result<(Endpoint, WebhookSecret), AppError> {
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
    // Count and insert under the owner's row lock: two registrations counted apart could
    // both see 19 and both insert.
    let row = conn
        .transaction::<_, AppError, _>(async |conn| {
            if db::users::lock_for_no_key_update(conn, owner)
                .await?
                .is_none()
            {
                return Err(AppError::NotFound);
            }
            if db::webhooks::count(conn, owner).await? >= MAX_ENDPOINTS {
                return Err(AppError::BadRequest(format!(
                    "an uploader can register at most {MAX_ENDPOINTS} webhooks; delete one first"
                )));
            }
            Ok(db::webhooks::insert(
                conn,
                WebhookId::new(),
                owner,
                parsed.as_str(),
                event_types,
                secret.expose(),
            )
            .await?)
        })
        .await?;
    tracing::info!(endpoint = %row.id, url = %row.url, "webhook registered");
    Ok((row.into(), secret))
}

/// The owner's endpoints.
pub async fn list(ctx: &AppContext, owner: UserId) -> Result<Vec<Endpoint>, AppError> {
    let mut conn = ctx.db.get().await?;
    let rows = db::webhooks::list(&mut conn, owner).await?;
    Ok(rows.into_iter().map(Endpoint::from).collect())
}

/// One endpoint.
pub async fn get(ctx: &AppContext, owner: UserId, id: WebhookId) -> Result<Endpoint, AppError> {
    let mut conn = ctx.db.get().await?;
    db::webhooks::find(&mut conn, owner, id)
        .await?
        .map(Endpoint::from)
        .ok_or(AppError::NotFound)
}

/// Deletes an endpoint; nothing more is sent to it.
pub async fn delete(ctx: &AppContext, owner: UserId, id: WebhookId) -> Result<(), AppError> {
    let mut conn = ctx.db.get().await?;
    match db::webhooks::delete(&mut conn, owner, id).await? {
        0 => Err(AppError::NotFound),
        _ => Ok(()),
    }
}

/// Mints a new secret; the old one keeps signing for [`ROTATION_OVERLAP`].
pub async fn rotate_secret(
    ctx: &AppContext,
    owner: UserId,
    id: WebhookId,
) -> Result<(Endpoint, WebhookSecret, chrono::DateTime<Utc>), AppError> {
    let secret = WebhookSecret::generate();
    let old_expires_at = Utc::now() + ROTATION_OVERLAP;
    let mut conn = ctx.db.get().await?;
    let row = db::webhooks::rotate(&mut conn, owner, id, secret.expose(), old_expires_at)
        .await?
        .ok_or(AppError::NotFound)?;
    tracing::info!(endpoint = %row.id, "webhook secret rotated");
    Ok((row.into(), secret, old_expires_at))
}

/// Queues one more delivery of an event to an endpoint, with the same event id, and returns
/// the delivery that will carry it. A delivery of that event to that endpoint still waiting
/// for a try is joined, not doubled, so repeated resends while it waits add no POST; only the
/// endpoint's subscribed types can be resent; and at most
/// [`MAX_RESENDS_PER_MINUTE`] new deliveries a minute per endpoint, counted in the database so
/// the limit holds across API nodes.
pub async fn resend(
    ctx: &AppContext,
    owner: UserId,
    id: WebhookId,
    event: EventId,
) -> Result<i64, AppError> {
    let mut conn = ctx.db.get().await?;
    conn.transaction::<_, AppError, _>(async |conn| {
        // Lock order: the outbox row, then the endpoint.
        let event = db::deliveries::lock_event_of_owner(conn, owner, event)
            .await?
            .ok_or(AppError::NotFound)?;
        let endpoint = db::webhooks::lock_owned(conn, owner, id)
            .await?
            .ok_or(AppError::NotFound)?;
        if endpoint.disabled_at.is_some() {
            return Err(AppError::Webhook(WebhookError::EndpointDisabled(
                endpoint
                    .disabled_reason
                    .unwrap_or_else(|| "disabled".into()),
            )));
        }
        if let Some(types) = &endpoint.event_types
            && !types.iter().flatten().any(|t| *t == event.event_type)
        {
            return Err(AppError::Webhook(WebhookError::NotSubscribed(
                event.event_type,
            )));
        }
        if let Some(waiting) = db::deliveries::waiting(conn, event.outbox_id, endpoint.id).await? {
            return Ok(waiting);
        }
        if db::deliveries::resends_since(conn, endpoint.id, RESEND_WINDOW.as_secs_f64()).await?
            >= MAX_RESENDS_PER_MINUTE
        {
            return Err(AppError::Webhook(WebhookError::TooManyResends(
                MAX_RESENDS_PER_MINUTE,
            )));
        }
        Ok(db::deliveries::insert_resend(conn, event.outbox_id, endpoint.id).await?)
    })
    .await
}

/// The endpoint's newest deliveries with every logged try.
pub async fn deliveries(
    ctx: &AppContext,
    owner: UserId,
    id: WebhookId,
    limit: i64,
) -> Result<Vec<Delivery>, AppError> {
    if !(1..=MAX_LOG).contains(&limit) {
        return Err(AppError::BadRequest(format!(
            "limit must be between 1 and {MAX_LOG}"
        )));
    }
    let mut conn = ctx.db.get().await?;
    if db::webhooks::find(&mut conn, owner, id).await?.is_none() {
        return Err(AppError::NotFound);
    }
    let (rows, attempts) = db::deliveries::of_endpoint(&mut conn, id, limit).await?;
    Ok(join_tries(rows, attempts)?)
}
