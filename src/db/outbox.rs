//! The notification outbox: events written in the same transaction as the change they
//! announce, so an event exists if and only if its change committed.

use diesel::QueryResult;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::domain::event::Event;

/// The channel relays LISTEN on.
pub const EVENTS_CHANNEL: &str = "vidq_events";

/// Inserts an event into the caller's transaction and, in the same statement, wakes relays
/// and long-polling feed readers when it commits, if any is waiting (see [`super::wake`]).
pub async fn insert(conn: &mut AsyncPgConnection, owner: Uuid, event: &Event) -> QueryResult<()> {
    use diesel::sql_types::{Jsonb, Text, Uuid as SqlUuid};
    super::prepared::prepared(format!(
        "WITH ins AS (
             INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
             VALUES ($1, $2, $3, $4, $5) RETURNING 1)
         SELECT pg_notify('{EVENTS_CHANNEL}', '') FROM ins WHERE NOT {nobody_waits}",
        nobody_waits = super::wake::nobody_waits_sql()
    ))
    .bind::<SqlUuid, _>(event.id.0)
    .bind::<Text, _>(event.event_type.as_str())
    .bind::<SqlUuid, _>(owner)
    .bind::<SqlUuid, _>(event.video_id.0)
    .bind::<Jsonb, _>(event.to_json())
    .execute(conn)
    .await
    .map(drop)
}
