//! What each running process says about itself: one `nodes` row per role and node, upserted
//! by the process every few seconds (its slots, and what only it knows, such as a sweeper's
//! breaker). The dashboard reads them; nothing depends on them for correctness.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::nodes;

/// Records that `role` on `node_id` is alive now.
pub async fn report(
    conn: &mut AsyncPgConnection,
    role: &str,
    node_id: &str,
    slots: i32,
    started_at: DateTime<Utc>,
    detail: &serde_json::Value,
) -> QueryResult<usize> {
    diesel::insert_into(nodes::table)
        .values((
            nodes::role.eq(role),
            nodes::node_id.eq(node_id),
            nodes::slots.eq(slots),
            nodes::started_at.eq(started_at),
            nodes::seen_at.eq(diesel::dsl::now),
            nodes::detail.eq(detail),
        ))
        .on_conflict((nodes::role, nodes::node_id))
        .do_update()
        .set((
            nodes::slots.eq(slots),
            nodes::started_at.eq(started_at),
            nodes::seen_at.eq(diesel::dsl::now),
            nodes::detail.eq(detail),
        ))
        .execute(conn)
        .await
}

/// Deletes the rows of processes not seen for `older_than_secs` (a node that left for good
/// should not stay on the dashboard forever).
pub async fn forget_silent(
    conn: &mut AsyncPgConnection,
    older_than_secs: f64,
) -> QueryResult<usize> {
    diesel::sql_query("DELETE FROM nodes WHERE seen_at < now() - make_interval(secs => $1)")
        .bind::<diesel::sql_types::Double, _>(older_than_secs)
        .execute(conn)
        .await
}
