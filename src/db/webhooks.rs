//! Webhook endpoints: registration, listing, secret rotation, and the disable a `410 Gone`
//! triggers.

use chrono::{DateTime, Utc};
use diesel::dsl;
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::webhook_endpoints as w;
use crate::domain::ids::{UserId, WebhookId};

/// An endpoint as its owner sees it (never the secrets).
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = w)]
pub struct EndpointRow {
    /// Id.
    pub id: WebhookId,
    /// Where events are POSTed.
    pub url: String,
    /// Types it receives; `None` is every type.
    pub event_types: Option<Vec<Option<String>>>,
    /// When a `410 Gone` turned it off.
    pub disabled_at: Option<DateTime<Utc>>,
    /// Why it was turned off.
    pub disabled_reason: Option<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
}

/// The endpoint `id` if `owner` registered it: every read and write of one endpoint on its
/// owner's behalf goes through this, so another owner's id finds nothing.
#[dsl::auto_type]
fn owned(owner: UserId, id: WebhookId) -> _ {
    w::table.filter(w::owner_id.eq(owner).and(w::id.eq(id)))
}

/// Registers an endpoint.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    id: WebhookId,
    owner: UserId,
    url: &str,
    event_types: Option<Vec<String>>,
    secret: &str,
) -> QueryResult<EndpointRow> {
    diesel::insert_into(w::table)
        .values((
            w::id.eq(id),
            w::owner_id.eq(owner),
            w::url.eq(url),
            w::event_types.eq(event_types.map(|t| t.into_iter().map(Some).collect::<Vec<_>>())),
            w::secret.eq(secret),
        ))
        .returning(EndpointRow::as_returning())
        .get_result(conn)
        .await
}

/// The owner's endpoints, oldest first.
pub async fn list(conn: &mut AsyncPgConnection, owner: UserId) -> QueryResult<Vec<EndpointRow>> {
    w::table
        .filter(w::owner_id.eq(owner))
        .order(w::id)
        .select(EndpointRow::as_select())
        .load(conn)
        .await
}

/// How many endpoints the owner has.
pub async fn count(conn: &mut AsyncPgConnection, owner: UserId) -> QueryResult<i64> {
    w::table
        .filter(w::owner_id.eq(owner))
        .count()
        .get_result(conn)
        .await
}

/// One of the owner's endpoints.
pub async fn find(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    id: WebhookId,
) -> QueryResult<Option<EndpointRow>> {
    owned(owner, id)
        .select(EndpointRow::as_select())
        .first(conn)
        .await
        .optional()
}

/// One of the owner's endpoints, locked `FOR NO KEY UPDATE`: resends to one endpoint queue
/// behind each other, so each sees the deliveries the one before it made.
pub async fn lock_owned(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    id: WebhookId,
) -> QueryResult<Option<EndpointRow>> {
    owned(owner, id)
        .select(EndpointRow::as_select())
        .for_no_key_update()
        .first(conn)
        .await
        .optional()
}

/// Deletes one of the owner's endpoints (its deliveries and their log go with it).
pub async fn delete(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    id: WebhookId,
) -> QueryResult<usize> {
    diesel::delete(owned(owner, id)).execute(conn).await
}

/// Makes `secret` the signing secret; the old one keeps signing until `old_expires_at`.
pub async fn rotate(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    id: WebhookId,
    secret: &str,
    old_expires_at: DateTime<Utc>,
) -> QueryResult<Option<EndpointRow>> {
    diesel::update(owned(owner, id))
        .set((
            w::previous_secret.eq(w::secret.nullable()),
            w::previous_secret_expires_at.eq(old_expires_at),
            w::secret.eq(secret),
        ))
        .returning(EndpointRow::as_returning())
        .get_result(conn)
        .await
        .optional()
}

/// Turns an endpoint off and discards its waiting deliveries, in one statement. Returns
/// whether this call turned it off (false if it already was, or is gone).
pub async fn disable(
    conn: &mut AsyncPgConnection,
    id: WebhookId,
    reason: &str,
) -> QueryResult<bool> {
    use diesel::sql_types::{Text, Uuid as SqlUuid};
    #[derive(QueryableByName)]
    struct Off {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let off: Off = super::prepared::prepared(
        "WITH off AS (
             UPDATE webhook_endpoints SET disabled_at = statement_timestamp(), disabled_reason = $2
              WHERE id = $1 AND disabled_at IS NULL RETURNING id),
         discarded AS (
             UPDATE event_deliveries SET status = 'discarded', last_error = $2
              WHERE endpoint_id IN (SELECT id FROM off) AND status = 'pending')
         SELECT count(*) AS n FROM off",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Text, _>(reason)
    .get_result(conn)
    .await?;
    Ok(off.n > 0)
}
