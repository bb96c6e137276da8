//! Routing: the one statement that turns unrouted outbox rows into deliveries, one per
//! (event, destination), so every later step works on deliveries alone.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::prepared::prepared;

/// What one routing round did.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct Routed {
    /// Outbox rows routed.
    #[diesel(sql_type = BigInt)]
    pub events: i64,
    /// Deliveries created for them.
    #[diesel(sql_type = BigInt)]
    pub deliveries: i64,
}

/// The routing statement ([`route`]): `$1` batch size, `$2` whether NATS deliveries are made.
/// Its duplicate check (`NOT EXISTS`) must stay one index lookup per event whatever plan
/// PostgreSQL picks; `event_deliveries_waiting_idx` carries the event for that (migration
/// 000012).
pub const ROUTE_SQL: &str = "
WITH batch AS (
    SELECT o.id, o.owner_id, o.event_type, o.created_at
      FROM notification_outbox o
     WHERE o.routed_at IS NULL
     ORDER BY o.id
     FOR UPDATE SKIP LOCKED
     LIMIT $1
), stamped AS (
    UPDATE notification_outbox o SET routed_at = statement_timestamp()
      FROM batch WHERE o.id = batch.id
), created AS (
    INSERT INTO event_deliveries (outbox_id, sink, endpoint_id)
    SELECT b.id, 'webhook', w.id
      FROM batch b
      JOIN webhook_endpoints w ON w.owner_id = b.owner_id
     WHERE w.disabled_at IS NULL
       AND w.created_at <= b.created_at
       AND (w.event_types IS NULL OR b.event_type = ANY (w.event_types))
       -- A resend before routing already queued this one: join it. OFFSET 0 keeps this a
       -- lookup per (event, endpoint) with both as keys: PostgreSQL would otherwise turn it
       -- into an anti join, and could then probe by the endpoint alone.
       AND NOT EXISTS (SELECT 1 FROM event_deliveries d
                        WHERE d.outbox_id = b.id AND d.endpoint_id = w.id
                          AND d.status IN ('pending', 'sending')
                       OFFSET 0)
    UNION ALL
    SELECT b.id, 'nats', NULL FROM batch b WHERE $2
    RETURNING 1
)
SELECT (SELECT count(*) FROM batch) AS events, (SELECT count(*) FROM created) AS deliveries";

/// Routes up to `limit` unrouted outbox rows, oldest first: one webhook delivery per live
/// endpoint of the event's owner that wants its type (and existed when it happened), plus one
/// NATS delivery when `to_nats`. Rows are claimed with SKIP LOCKED and stamped in the same
/// statement, so concurrent relays never route a row twice.
pub async fn route(conn: &mut AsyncPgConnection, limit: i64, to_nats: bool) -> QueryResult<Routed> {
    prepared(ROUTE_SQL)
        .bind::<BigInt, _>(limit)
        .bind::<Bool, _>(to_nats)
        .get_result(conn)
        .await
}
