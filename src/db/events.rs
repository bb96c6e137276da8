//! The pull feed over the outbox, paged by the inserting transaction's `xid8`.
//!
//! A cursor on the identity column would skip a row whose transaction took its id early and
//! committed late. Paging by `(xid, id)` and serving only rows whose transaction is older than
//! every transaction still running (`xid < pg_snapshot_xmin(pg_current_snapshot())`) means a
//! row can only become visible behind a cursor if its transaction was already finished when
//! the cursor was issued, which is impossible (invariant I8).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Jsonb, Nullable, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::prepared::prepared;
use crate::domain::ids::UserId;

/// A position in the feed: after the row `(xid, id)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FeedPosition {
    /// The inserting transaction (64-bit, never wraps).
    pub xid: u64,
    /// The row's id within it.
    pub id: i64,
}

/// One event row of the feed.
#[derive(Debug, Clone, QueryableByName)]
pub struct FeedRow {
    /// Outbox row id.
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// The inserting transaction, as text (xid8 has no binary mapping in diesel).
    #[diesel(sql_type = Text)]
    pub xid: String,
    /// The event envelope.
    #[diesel(sql_type = Jsonb)]
    pub body: serde_json::Value,
}

impl FeedRow {
    /// The position just after this row.
    pub fn position(&self) -> FeedPosition {
        FeedPosition {
            xid: self.xid.parse().unwrap_or_default(),
            id: self.id,
        }
    }
}

/// Up to `limit` of the owner's events after `after`, in commit-safe order, optionally only
/// one type.
pub async fn page(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    after: FeedPosition,
    event_type: Option<&str>,
    limit: i64,
) -> QueryResult<Vec<FeedRow>> {
    prepared(
        "SELECT id, xid::text AS xid, payload AS body
           FROM notification_outbox
          WHERE owner_id = $1
            AND (xid, id) > ($2::text::xid8, $3)
            AND xid < pg_snapshot_xmin(pg_current_snapshot())
            AND ($4::text IS NULL OR event_type = $4)
          ORDER BY xid, id
          LIMIT $5",
    )
    .bind::<SqlUuid, _>(owner)
    .bind::<Text, _>(after.xid.to_string())
    .bind::<BigInt, _>(after.id)
    .bind::<Nullable<Text>, _>(event_type)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}
