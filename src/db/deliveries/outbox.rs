//! The notification outbox: events written in the same transaction as the change they
//! announce, so an event exists if and only if its change committed.

use diesel::QueryResult;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::domain::event::Event;
use crate::domain::ids::UserId;

/// The channel relays LISTEN on (declared with the wake-up rules it follows).
pub use crate::db::wake::EVENTS_CHANNEL;

/// Inserts an event into the caller's transaction and, in the same statement, wakes relays
/// and long-polling feed readers when it commits, if any is waiting (see [`crate::db::wake`]).
pub async fn insert(conn: &AsyncPgConnection, owner: UserId, event: &Event) -> QueryResult<()> {
    insert_with(conn, Some(owner), event, "VALUES ($1, $2, $3, $4, $5)").await
}

/// [`insert`] for an event about a video this transaction has just updated: the owner and
/// `occurred_at` (the video's `updated_at` as this transaction left it) are read from the
/// video row. A finalize sends it right behind its video update, in the same pipeline,
/// without waiting for the update's answer. No row is inserted if the video is gone; the
/// finalize's fence then fails too, because its job went with the video.
pub async fn insert_stamped(conn: &AsyncPgConnection, event: &Event) -> QueryResult<()> {
    let source = format!(
        "SELECT $1, $2, v.owner_id, $4,
                jsonb_set($5, '{{occurred_at}}',
                          to_jsonb(to_char(v.updated_at AT TIME ZONE 'UTC', '{pattern}')))
           FROM videos v WHERE v.id = $4",
        pattern = OCCURRED_AT_SQL_PATTERN
    );
    insert_with(conn, None, event, &source).await
}

/// [`insert_stamped`] for several events in one statement, each stamped from its own video,
/// with one wake-up test for all of them. Events whose video is gone insert nothing.
pub async fn insert_all_stamped(mut conn: &AsyncPgConnection, events: &[Event]) -> QueryResult<()> {
    use diesel::sql_types::{Array, Jsonb, Text, Uuid as SqlUuid};
    crate::db::prepared::prepared(format!(
        "WITH ins AS (
             INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
             SELECT e.event_id, e.event_type, v.owner_id, v.id,
                    jsonb_set(e.payload, '{{occurred_at}}',
                              to_jsonb(to_char(v.updated_at AT TIME ZONE 'UTC', '{pattern}')))
               FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::jsonb[]) WITH ORDINALITY
                    AS e (event_id, event_type, video_id, payload, n)
               JOIN videos v ON v.id = e.video_id
              ORDER BY e.n
             RETURNING 1)
         SELECT pg_notify('{EVENTS_CHANNEL}', '')
          WHERE EXISTS (SELECT 1 FROM ins) AND NOT {nobody_waits}",
        pattern = OCCURRED_AT_SQL_PATTERN,
        nobody_waits = crate::db::wake::nobody_waits_sql()
    ))
    .bind::<Array<SqlUuid>, _>(events.iter().map(|e| e.id.0).collect::<Vec<_>>())
    .bind::<Array<Text>, _>(
        events
            .iter()
            .map(|e| e.event_type.as_str())
            .collect::<Vec<_>>(),
    )
    .bind::<Array<SqlUuid>, _>(events.iter().map(|e| e.video_id.0).collect::<Vec<_>>())
    .bind::<Array<Jsonb>, _>(events.iter().map(Event::to_json).collect::<Vec<_>>())
    .execute(&mut conn)
    .await
    .map(drop)
}

/// [`crate::domain::event::OCCURRED_AT_FORMAT`] in `to_char`'s words.
const OCCURRED_AT_SQL_PATTERN: &str = r#"YYYY-MM-DD"T"HH24:MI:SS.US"Z""#;

/// `source` gives the row (`$1` event id, `$2` type, `$3` owner, `$4` video, `$5` payload).
async fn insert_with(
    mut conn: &AsyncPgConnection,
    owner: Option<UserId>,
    event: &Event,
    source: &str,
) -> QueryResult<()> {
    use diesel::sql_types::{Jsonb, Text, Uuid as SqlUuid};
    crate::db::prepared::prepared(format!(
        "WITH ins AS (
             INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
             {source} RETURNING 1)
         SELECT pg_notify('{EVENTS_CHANNEL}', '') FROM ins WHERE NOT {nobody_waits}",
        nobody_waits = crate::db::wake::nobody_waits_sql()
    ))
    .bind::<SqlUuid, _>(event.id.0)
    .bind::<Text, _>(event.event_type.as_str())
    .bind::<diesel::sql_types::Nullable<SqlUuid>, _>(owner)
    .bind::<SqlUuid, _>(event.video_id.0)
    .bind::<Jsonb, _>(event.to_json())
    .execute(&mut conn)
    .await
    .map(drop)
}
