//! Statements of an upload through vidq while its bytes arrive (tus or the single PUT):
//! register it as `receiving`, count fsynced bytes with a CAS on the previous count, hand it
//! to the sweeper (`receiving -> pending`), drop it (termination), expire it. Only `uploads`
//! rows are touched (lock order step 2 in `db/mod.rs`).

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::sweep::NewVidqUpload;
use crate::domain::ids::UploadId;
use crate::domain::upload::{RejectReason, UploadState, UploadVia};

/// The channel a node's sweeper LISTENs on; the payload is the node id whose spool now
/// holds a complete upload, so that node's sweeper starts a round at once.
pub const SWEEP_CHANNEL: &str = "vidq_sweep";

/// Registers an upload through vidq whose bytes have not arrived yet (`receiving`, 0 bytes).
/// The spool file exists (empty, fsynced) before this commits.
pub async fn insert_receiving(
    conn: &mut AsyncPgConnection,
    new: &NewVidqUpload<'_>,
) -> diesel::QueryResult<usize> {
    use crate::db::schema::uploads::dsl;
    use diesel::ExpressionMethods;
    diesel::insert_into(dsl::uploads)
        .values((
            &new.contract,
            dsl::state.eq(UploadState::Receiving.as_str()),
            dsl::via.eq(UploadVia::Vidq.as_str()),
            dsl::received_bytes.eq(0),
            dsl::spool_path.eq(new.spool_path),
            dsl::node_id.eq(new.node_id),
            dsl::store.eq(crate::domain::upload::UploadStore::Spool.as_str()),
        ))
        .execute(conn)
        .await
}

/// CAS `received_bytes: from -> to` while `receiving`; with `complete`, also
/// `receiving -> pending` (the ledger row the sweeper re-drives) and a wake-up for the
/// node's sweeper in the same statement. 0 rows: another request moved the count, or the
/// upload was expired or terminated in between.
pub async fn advance(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    from: i64,
    to: i64,
    complete: bool,
) -> diesel::QueryResult<usize> {
    #[derive(QueryableByName)]
    struct Moved {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let sql = format!(
        "WITH moved AS (
             UPDATE uploads
                SET received_bytes = $3,
                    state = CASE WHEN $4 THEN '{pending}' ELSE state END,
                    updated_at = statement_timestamp()
              WHERE id = $1 AND state = '{receiving}' AND received_bytes = $2
             RETURNING node_id)
         -- The CASE calls pg_notify only for a completed upload: a NOTIFY serializes the
         -- commits of notifying transactions, which every chunk need not pay for.
         SELECT count(*) AS n, count(CASE WHEN $4 THEN pg_notify('{SWEEP_CHANNEL}', node_id) END)
           FROM moved",
        pending = UploadState::Pending.as_str(),
        receiving = UploadState::Receiving.as_str(),
    );
    let moved: Moved = diesel::sql_query(sql)
        .bind::<diesel::sql_types::Uuid, _>(id)
        .bind::<BigInt, _>(from)
        .bind::<BigInt, _>(to)
        .bind::<Bool, _>(complete)
        .get_result(conn)
        .await?;
    Ok(moved.n as usize)
}

/// Deletes a `receiving` upload (tus termination); 0 when it is no longer receiving.
pub async fn delete_receiving(
    conn: &mut AsyncPgConnection,
    id: UploadId,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(format!(
        "DELETE FROM uploads WHERE id = $1 AND state = '{}'",
        UploadState::Receiving.as_str()
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .execute(conn)
    .await
}

/// An upload through vidq that never finished arriving, now expired.
#[derive(Debug, Clone, QueryableByName)]
pub struct ExpiredReceiving {
    /// The contract.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: UploadId,
    /// Its spool file, to remove.
    #[diesel(sql_type = Nullable<Text>)]
    pub spool_path: Option<String>,
}

/// CAS `receiving -> expired` for up to `limit` of `node`'s uploads past `expires_at` (by
/// the database clock); a request holding one finds it closed (`410`).
pub async fn expire_receiving(
    conn: &mut AsyncPgConnection,
    node: &str,
    limit: i64,
) -> diesel::QueryResult<Vec<ExpiredReceiving>> {
    diesel::sql_query(format!(
        "WITH page AS (
             SELECT id FROM uploads
              WHERE state = '{receiving}' AND node_id = $1 AND expires_at < statement_timestamp()
              ORDER BY id LIMIT $2
              FOR UPDATE SKIP LOCKED)
         UPDATE uploads u SET state = '{expired}', updated_at = statement_timestamp()
           FROM page WHERE u.id = page.id
         RETURNING u.id, u.spool_path",
        receiving = UploadState::Receiving.as_str(),
        expired = UploadState::Expired.as_str(),
    ))
    .bind::<Text, _>(node)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}

/// CAS `receiving -> rejected` with its reason (the spool file was lost mid-upload).
pub async fn reject_receiving(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    reason: RejectReason,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE uploads SET state = '{rejected}', reject_reason = $2,
                updated_at = statement_timestamp()
          WHERE id = $1 AND state = '{receiving}'",
        rejected = UploadState::Rejected.as_str(),
        receiving = UploadState::Receiving.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<Text, _>(reason.as_str())
    .execute(conn)
    .await
}
