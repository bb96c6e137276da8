//! The notification outbox: events written in the same transaction as the change they
//! announce, so an event exists if and only if its change committed.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::notification_outbox;
use crate::domain::event::Event;

/// The channel relays LISTEN on.
pub const EVENTS_CHANNEL: &str = "vidq_events";

/// Inserts an event into the caller's transaction and wakes relays when it commits.
pub async fn insert(conn: &mut AsyncPgConnection, owner: Uuid, event: &Event) -> QueryResult<()> {
    diesel::insert_into(notification_outbox::table)
        .values((
            notification_outbox::event_id.eq(event.id.0),
            notification_outbox::event_type.eq(event.event_type.as_str()),
            notification_outbox::owner_id.eq(owner),
            notification_outbox::video_id.eq(event.video_id.0),
            notification_outbox::payload.eq(event.to_json()),
        ))
        .execute(conn)
        .await?;
    diesel::sql_query(format!("NOTIFY {EVENTS_CHANNEL}"))
        .execute(conn)
        .await
        .map(drop)
}
