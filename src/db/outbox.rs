//! The notification outbox: events written in the same transaction as the change they
//! announce, so an event exists if and only if its change committed.

use diesel::QueryResult;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::domain::event::Event;

/// The channel relays LISTEN on.
pub const EVENTS_CHANNEL: &str = "vidq_events";

/// Inserts an event into the caller's transaction. Call [`wake_relays`] once it committed.
pub async fn insert(conn: &mut AsyncPgConnection, owner: Uuid, event: &Event) -> QueryResult<()> {
    use diesel::sql_types::{Jsonb, Text, Uuid as SqlUuid};
    super::prepared::prepared(
        "INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind::<SqlUuid, _>(event.id.0)
    .bind::<Text, _>(event.event_type.as_str())
    .bind::<SqlUuid, _>(owner)
    .bind::<SqlUuid, _>(event.video_id.0)
    .bind::<Jsonb, _>(event.to_json())
    .execute(conn)
    .await
    .map(drop)
}

/// Wakes listening relays after a transaction that inserted outbox rows has committed.
///
/// The NOTIFY is sent in its own tiny transaction, not in the producing one: PostgreSQL
/// serializes the commits of notifying transactions on one global lock, and a producing
/// transaction holds it through its WAL flush, which capped finalize throughput (measured
/// with 8 workers: 60% of the SQL-only ceiling with the NOTIFY inside, 76% without). This one
/// commits without waiting for the flush (`synchronous_commit` off for it alone): a lost
/// wake-up costs at most one relay poll interval, and NOTIFY is never the source of truth.
pub async fn wake_relays(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    super::prepared::prepared(format!(
        "SELECT set_config('synchronous_commit', 'off', true), pg_notify('{EVENTS_CHANNEL}', '')"
    ))
    .execute(conn)
    .await
    .map(drop)
}
