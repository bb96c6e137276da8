//! Reads of the delivery log: an endpoint's deliveries with their tries, as its owner sees
//! them, and the count of work still owed (what benchmarks wait on).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::prepared::prepared;
use crate::domain::ids::WebhookId;

/// A delivery as its owner sees it.
#[derive(Debug, Clone, Queryable)]
pub struct DeliveryRow {
    /// Delivery id.
    pub id: i64,
    /// The event.
    pub event_id: Uuid,
    /// Its type.
    pub event_type: String,
    /// pending, sending, delivered, exhausted, discarded.
    pub status: crate::domain::delivery::DeliveryStatus,
    /// Tries started.
    pub attempt_count: i32,
    /// When the next try is due (pending).
    pub next_attempt_at: DateTime<Utc>,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// A logged try.
#[derive(Debug, Clone, Queryable)]
pub struct AttemptRow {
    /// Its delivery.
    pub delivery_id: i64,
    /// Try number.
    pub attempt: i32,
    /// Which relay made it.
    pub relay_id: String,
    /// Start.
    pub started_at: DateTime<Utc>,
    /// End.
    pub finished_at: DateTime<Utc>,
    /// The receiver's status code.
    pub response_status: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
}

/// The endpoint's newest deliveries (at most `limit`) with their tries.
pub async fn of_endpoint(
    conn: &mut AsyncPgConnection,
    endpoint: WebhookId,
    limit: i64,
) -> QueryResult<(Vec<DeliveryRow>, Vec<AttemptRow>)> {
    use crate::db::schema::{
        delivery_attempts as a, event_deliveries as d, notification_outbox as o,
    };
    let deliveries: Vec<DeliveryRow> = d::table
        .inner_join(o::table)
        .filter(d::endpoint_id.eq(endpoint))
        .order(d::id.desc())
        .limit(limit)
        .select((
            d::id,
            o::event_id,
            o::event_type,
            d::status,
            d::attempt_count,
            d::next_attempt_at,
            d::last_error,
            d::delivered_at,
            d::created_at,
        ))
        .load(conn)
        .await?;
    let ids: Vec<i64> = deliveries.iter().map(|r| r.id).collect();
    let attempts = a::table
        .filter(a::delivery_id.eq_any(ids))
        .order((a::delivery_id, a::attempt))
        .load(conn)
        .await?;
    Ok((deliveries, attempts))
}

/// Outbox rows not yet routed plus deliveries not yet finished (benchmarks wait for 0).
pub async fn pending_count(conn: &mut AsyncPgConnection) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let n: N = prepared(
        "SELECT (SELECT count(*) FROM notification_outbox WHERE routed_at IS NULL)
              + (SELECT count(*) FROM event_deliveries WHERE status IN ('pending', 'sending')) AS n",
    )
    .get_result(conn)
    .await?;
    Ok(n.n)
}
