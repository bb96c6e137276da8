//! Resends: an owner asks for an event to be delivered to an endpoint again. These are the
//! statements of that transaction, in its lock order (outbox row, then endpoint, then the
//! new delivery).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::prepared::prepared;
use crate::domain::ids::{EventId, UserId, WebhookId};

/// The outbox row of an event a resend names.
#[derive(Debug, Clone, QueryableByName)]
pub struct ResendableEvent {
    /// Outbox row id.
    #[diesel(sql_type = BigInt)]
    pub outbox_id: i64,
    /// `video.ready`...
    #[diesel(sql_type = Text)]
    pub event_type: String,
}

/// Finds the owner's event and locks its outbox row `FOR KEY SHARE` (so a resend takes the
/// outbox before the endpoint, in the lock order); `None` if it is not the owner's.
pub async fn lock_event_of_owner(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    event: EventId,
) -> QueryResult<Option<ResendableEvent>> {
    prepared(
        "SELECT id AS outbox_id, event_type FROM notification_outbox
          WHERE event_id = $1 AND owner_id = $2 FOR KEY SHARE",
    )
    .bind::<SqlUuid, _>(event)
    .bind::<SqlUuid, _>(owner)
    .get_result(conn)
    .await
    .optional()
}

#[derive(QueryableByName)]
struct DeliveryId {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// The delivery of this event to this endpoint that waits for its next try, if any: a resend
/// joins it rather than adding a second one. (One in flight is not joined: its try may
/// already have reached the receiver, before the caller asked again.)
pub async fn waiting(
    conn: &mut AsyncPgConnection,
    outbox_id: i64,
    endpoint: WebhookId,
) -> QueryResult<Option<i64>> {
    prepared(
        "SELECT id FROM event_deliveries
          WHERE outbox_id = $1 AND endpoint_id = $2 AND status = 'pending'
          ORDER BY id LIMIT 1",
    )
    .bind::<BigInt, _>(outbox_id)
    .bind::<SqlUuid, _>(endpoint)
    .get_result::<DeliveryId>(conn)
    .await
    .optional()
    .map(|row| row.map(|r| r.id))
}

/// How many deliveries resends made for the endpoint in the last `window_secs`, by the
/// database's clock (read through the partial index on resent deliveries).
pub async fn resends_since(
    conn: &mut AsyncPgConnection,
    endpoint: WebhookId,
    window_secs: f64,
) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let n: N = prepared(
        "SELECT count(*) AS n FROM event_deliveries
          WHERE endpoint_id = $1 AND resent
            AND created_at > statement_timestamp() - make_interval(secs => $2)",
    )
    .bind::<SqlUuid, _>(endpoint)
    .bind::<Double, _>(window_secs)
    .get_result(conn)
    .await?;
    Ok(n.n)
}

/// Queues one more delivery of an event to an endpoint, and wakes the relays when the
/// caller's transaction commits.
pub async fn insert_resend(
    conn: &mut AsyncPgConnection,
    outbox_id: i64,
    endpoint: WebhookId,
) -> QueryResult<i64> {
    prepared(format!(
        "WITH created AS (
             INSERT INTO event_deliveries (outbox_id, sink, endpoint_id, resent)
             VALUES ($1, 'webhook', $2, true)
             RETURNING id)
         SELECT id FROM created, pg_notify('{}', '')",
        crate::db::deliveries::outbox::EVENTS_CHANNEL
    ))
    .bind::<BigInt, _>(outbox_id)
    .bind::<SqlUuid, _>(endpoint)
    .get_result::<DeliveryId>(conn)
    .await
    .map(|r| r.id)
}
