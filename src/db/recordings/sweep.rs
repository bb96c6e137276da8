//! The sweeper's side of the file ledger: claim this node's pending files under a lease, then
//! settle each (uploaded, a failed try to retry later, rejected) or give the claim back.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Int4, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::domain::recording::FileState;

/// A pending recording file claimed by this node's sweeper.
#[derive(Debug, Clone, QueryableByName)]
pub struct ClaimedFile {
    /// The row.
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// Its recording.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub recording_id: Uuid,
    /// Where it goes.
    #[diesel(sql_type = Text)]
    pub object_key: String,
    /// The size the ledger holds for it (the CAS checks it).
    #[diesel(sql_type = BigInt)]
    pub size_bytes: i64,
    /// Spool file, relative to the root.
    #[diesel(sql_type = Text)]
    pub spool_path: String,
    /// Failed tries so far.
    #[diesel(sql_type = Int4)]
    pub tries: i32,
    /// SHA-256 (hex) of the bytes the row names (`None`: a row from before digests).
    #[diesel(sql_type = Nullable<Text>)]
    pub content_sha256: Option<String>,
}

/// Claims up to `limit` due pending files of `node` with an id above `after`, in id order,
/// for `lease_secs`, in one statement (as `uploads::sweep::claim_page` does for uploads).
pub async fn claim_files(
    conn: &mut AsyncPgConnection,
    node: &str,
    after: Option<i64>,
    limit: i64,
    lease_secs: f64,
) -> QueryResult<Vec<ClaimedFile>> {
    let mut rows: Vec<ClaimedFile> = diesel::sql_query(format!(
        "WITH page AS (
             SELECT id FROM recording_files
              WHERE id > $1 AND state = '{pending}' AND node_id = $2
                AND (next_try_at IS NULL OR next_try_at <= statement_timestamp())
                AND (claimed_until IS NULL OR claimed_until < statement_timestamp())
              ORDER BY id LIMIT $3
              FOR UPDATE SKIP LOCKED)
         UPDATE recording_files f
            SET claimed_until = statement_timestamp() + make_interval(secs => $4)
           FROM page WHERE f.id = page.id
         RETURNING f.id, f.recording_id, f.object_key, f.size_bytes, f.spool_path, f.tries,
                   f.content_sha256",
        pending = FileState::Pending.as_str(),
    ))
    .bind::<BigInt, _>(after.unwrap_or(0))
    .bind::<Text, _>(node)
    .bind::<BigInt, _>(limit)
    .bind::<diesel::sql_types::Double, _>(lease_secs)
    .load(conn)
    .await?;
    rows.sort_by_key(|r| r.id);
    Ok(rows)
}

/// CAS `pending -> uploaded` when S3 holds the object with the size and the digest the
/// ledger holds now and the row still names the spool file that was PUT (a file sent again
/// while it was PUT changed them: 0 rows, the next try PUTs the new one). `sha256` is what
/// S3 reported; a row from before digests (NULL) matches only an object without one.
pub async fn mark_file_uploaded(
    conn: &mut AsyncPgConnection,
    id: i64,
    size: i64,
    sha256: Option<&str>,
    spool_path: &str,
) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE recording_files SET state = '{uploaded}', uploaded_at = statement_timestamp(),
                claimed_until = NULL
          WHERE id = $1 AND state = '{pending}' AND size_bytes = $2 AND spool_path = $3
            AND content_sha256 IS NOT DISTINCT FROM $4",
        uploaded = FileState::Uploaded.as_str(),
        pending = FileState::Pending.as_str(),
    ))
    .bind::<BigInt, _>(id)
    .bind::<BigInt, _>(size)
    .bind::<Text, _>(spool_path)
    .bind::<Nullable<Text>, _>(sha256)
    .execute(conn)
    .await
}

/// A failed try: backoff stored on the row, claim released.
pub async fn record_file_failure(
    conn: &mut AsyncPgConnection,
    id: i64,
    delay_secs: f64,
    error: &str,
) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE recording_files SET tries = tries + 1,
                next_try_at = statement_timestamp() + make_interval(secs => $2),
                last_error = $3, claimed_until = NULL
          WHERE id = $1 AND state = '{}'",
        FileState::Pending.as_str()
    ))
    .bind::<BigInt, _>(id)
    .bind::<diesel::sql_types::Double, _>(delay_secs)
    .bind::<Text, _>(error)
    .execute(conn)
    .await
}

/// CAS `pending -> rejected` with its reason: never PUT, never tried again.
/// Only while the row still names `spool_path`: a file sent again meanwhile replaced the
/// version that was refused (and removed it), and the new one is judged on its own.
pub async fn reject_file(
    conn: &mut AsyncPgConnection,
    id: i64,
    spool_path: &str,
    reason: crate::domain::upload::RejectReason,
) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE recording_files SET state = '{rejected}', reject_reason = $2, claimed_until = NULL
          WHERE id = $1 AND state = '{pending}' AND spool_path = $3",
        rejected = FileState::Rejected.as_str(),
        pending = FileState::Pending.as_str(),
    ))
    .bind::<BigInt, _>(id)
    .bind::<Text, _>(reason.as_str())
    .bind::<Text, _>(spool_path)
    .execute(conn)
    .await
}

/// Gives claims back without a try.
pub async fn release_files(conn: &mut AsyncPgConnection, ids: &[i64]) -> QueryResult<usize> {
    if ids.is_empty() {
        return Ok(0);
    }
    diesel::sql_query(format!(
        "UPDATE recording_files SET claimed_until = NULL WHERE id = ANY($1) AND state = '{}'",
        FileState::Pending.as_str()
    ))
    .bind::<diesel::sql_types::Array<BigInt>, _>(ids)
    .execute(conn)
    .await
}
