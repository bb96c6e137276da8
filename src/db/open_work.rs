//! Per-user caps on open work, held under any concurrency: the count and the insert it
//! admits run in one transaction that first takes the user's advisory lock for that kind of
//! work, so two creates from one key are counted one after the other on every API node.

use diesel::sql_types::{BigInt, Integer, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::domain::ids::UserId;
use crate::domain::open_work::OpenWork;
use crate::domain::recording::RecordingState;
use crate::domain::upload::UploadState;

/// The first key of the advisory locks of one kind of open work: vidq's other advisory locks
/// use other first keys, so no cap lock ever waits on them.
fn lock_class(kind: OpenWork) -> i32 {
    match kind {
        OpenWork::Uploads => 0x7664_7101,
        OpenWork::Recordings => 0x7664_7102,
    }
}

/// Inside a transaction: takes `owner`'s lock of `kind` (held until the transaction ends),
/// then says whether they have fewer than `cap` items open. The caller inserts the new item
/// in the same transaction only when this is `true`.
pub async fn lock_and_has_room(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    kind: OpenWork,
    cap: u32,
) -> diesel::QueryResult<bool> {
    // Users whose ids hash alike share a lock: they wait on each other for a moment, never
    // count each other's work.
    diesel::sql_query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind::<Integer, _>(lock_class(kind))
        .bind::<Text, _>(owner.0.to_string())
        .execute(conn)
        .await?;
    let open = match kind {
        OpenWork::Uploads => {
            let states = [UploadState::Receiving, UploadState::Pending].map(UploadState::as_str);
            count_open(conn, "uploads", &states, owner, cap).await?
        }
        OpenWork::Recordings => {
            let states = [
                RecordingState::Waiting,
                RecordingState::Live,
                RecordingState::Ending,
            ]
            .map(RecordingState::as_str);
            count_open(conn, "recordings", &states, owner, cap).await?
        }
    };
    Ok(open < i64::from(cap))
}

/// How many rows of `owner` in `table` are in one of `states`, counted up to `limit` at most
/// (the partial indexes `uploads_open_owner_idx` and `recordings_open_owner_idx` hold only
/// those rows).
async fn count_open(
    conn: &mut AsyncPgConnection,
    table: &'static str,
    states: &[&'static str],
    owner: UserId,
    limit: u32,
) -> diesel::QueryResult<i64> {
    #[derive(diesel::QueryableByName)]
    struct Open {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let states = states
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let open: Open = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM (SELECT 1 FROM {table}
          WHERE owner_id = $1 AND state IN ({states}) LIMIT $2) open"
    ))
    .bind::<diesel::sql_types::Uuid, _>(owner.0)
    .bind::<BigInt, _>(i64::from(limit))
    .get_result(conn)
    .await?;
    Ok(open.n)
}
