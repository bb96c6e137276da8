//! Removal: pruning finished events after their retention, and the steps of a user's
//! deletion that take the owner's outbox rows, endpoints and deliveries in the lock order.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Double, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::prepared::prepared;
use crate::domain::ids::UserId;

/// Deletes up to `limit` outbox rows older than `retention_secs` (by the database's clock)
/// that are routed and whose deliveries are all finished, oldest first; their deliveries and
/// tries go with them. Rows another transaction holds are skipped, not waited for. Returns
/// how many.
pub async fn prune(
    conn: &mut AsyncPgConnection,
    retention_secs: f64,
    limit: i64,
) -> QueryResult<usize> {
    prepared(
        "DELETE FROM notification_outbox
          WHERE id IN (
              SELECT o.id FROM notification_outbox o
               WHERE o.created_at < statement_timestamp() - make_interval(secs => $1)
                 AND o.routed_at IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM event_deliveries d
                                  WHERE d.outbox_id = o.id AND d.status IN ('pending', 'sending'))
               ORDER BY o.id
               FOR UPDATE SKIP LOCKED
               LIMIT $2)",
    )
    .bind::<Double, _>(retention_secs)
    .bind::<BigInt, _>(limit)
    .execute(conn)
    .await
}

/// Deletes up to `limit` of the owner's oldest outbox rows with their deliveries and tries,
/// locking the rows and then their deliveries in id order (lock order); returns how many
/// outbox rows went. One page of a user's deletion.
pub async fn delete_page_of_owner(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    limit: i64,
) -> QueryResult<usize> {
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = BigInt)]
        id: i64,
    }
    let ids: Vec<i64> = prepared(
        "SELECT id FROM notification_outbox WHERE owner_id = $1 ORDER BY id LIMIT $2 FOR UPDATE",
    )
    .bind::<SqlUuid, _>(owner)
    .bind::<BigInt, _>(limit)
    .load::<Id>(conn)
    .await?
    .into_iter()
    .map(|r| r.id)
    .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    prepared("SELECT 1 FROM event_deliveries WHERE outbox_id = ANY ($1) ORDER BY id FOR UPDATE")
        .bind::<Array<BigInt>, _>(&ids)
        .execute(conn)
        .await?;
    prepared("DELETE FROM notification_outbox WHERE id = ANY ($1)")
        .bind::<Array<BigInt>, _>(&ids)
        .execute(conn)
        .await
}

/// Locks the owner's outbox rows, webhook endpoints and deliveries, each in id order, so that
/// deleting the owner afterwards waits on no relay that waits on it (lock order).
pub async fn lock_of_owner(conn: &mut AsyncPgConnection, owner: UserId) -> QueryResult<()> {
    for sql in [
        "SELECT 1 FROM notification_outbox WHERE owner_id = $1 ORDER BY id FOR UPDATE",
        "SELECT 1 FROM webhook_endpoints WHERE owner_id = $1 ORDER BY id FOR UPDATE",
        "SELECT 1 FROM event_deliveries d WHERE d.outbox_id IN
             (SELECT id FROM notification_outbox WHERE owner_id = $1) ORDER BY d.id FOR UPDATE OF d",
    ] {
        prepared(sql).bind::<SqlUuid, _>(owner).execute(conn).await?;
    }
    Ok(())
}
