//! Upload contracts: one row per object key a client was told to PUT to.

pub mod multiparts;
pub mod receiving;
pub mod sweep;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::schema::uploads;
use crate::domain::ids::{UploadId, UserId, VideoId};
use crate::domain::upload::UploadState;

/// An `uploads` row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = uploads)]
pub struct UploadRow {
    /// Primary key (UUIDv7).
    pub id: UploadId,
    /// The uploader.
    pub owner_id: UserId,
    /// Server-chosen S3 key.
    pub object_key: String,
    /// The client's filename, a label only.
    pub filename: String,
    /// Checked video media type.
    pub content_type: String,
    /// Exact size the object must have.
    pub declared_size: i64,
    /// See [`UploadState`].
    pub state: crate::domain::upload::UploadState,
    /// Why it was rejected, if it was.
    pub reject_reason: Option<crate::domain::upload::RejectReason>,
    /// When the presigned URL stops working.
    pub expires_at: DateTime<Utc>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last state change.
    pub updated_at: DateTime<Utc>,
    /// `presigned` or `vidq` (see [`crate::domain::upload::UploadVia`]).
    pub via: crate::domain::upload::UploadVia,
    /// Bytes of an upload through vidq received and fsynced so far.
    pub received_bytes: i64,
    /// Spool file of an upload through vidq, relative to the node's spool root.
    pub spool_path: Option<String>,
    /// The node whose spool holds it.
    pub node_id: Option<String>,
    /// The client's whole-file checksum (`sha256:<hex>`), if it gave one.
    pub checksum: Option<String>,
    /// Where its bytes are kept while they arrive (`None`: a presigned upload).
    pub store: Option<crate::domain::upload::UploadStore>,
    /// A tus upload's `Upload-Metadata` as its client sent it.
    pub tus_metadata: Option<String>,
}

/// Values for a new contract.
#[derive(Debug, Insertable)]
#[diesel(table_name = uploads)]
pub struct NewUploadRow<'a> {
    /// Primary key.
    pub id: UploadId,
    /// The uploader.
    pub owner_id: UserId,
    /// Server-chosen key.
    pub object_key: &'a str,
    /// Label.
    pub filename: &'a str,
    /// Checked media type.
    pub content_type: &'a str,
    /// Declared size.
    pub declared_size: i64,
    /// When the presigned URL expires.
    pub expires_at: DateTime<Utc>,
    /// The client's whole-file checksum (`sha256:<hex>`), for an upload through vidq.
    pub checksum: Option<&'a str>,
    /// A tus upload's `Upload-Metadata` as its client sent it.
    pub tus_metadata: Option<&'a str>,
}

/// Records a new pending contract.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    new: &NewUploadRow<'_>,
) -> QueryResult<UploadRow> {
    diesel::insert_into(uploads::table)
        .values(new)
        .returning(UploadRow::as_returning())
        .get_result(conn)
        .await
}

/// The contract, only if `owner` holds it (a stranger's id reads as absent).
pub async fn find_owned(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    id: UploadId,
) -> QueryResult<Option<UploadRow>> {
    uploads::table
        .filter(uploads::id.eq(id).and(uploads::owner_id.eq(owner)))
        .select(UploadRow::as_select())
        .first(conn)
        .await
        .optional()
}

/// The contract, only if the holder of the key whose hash is `key_hash` owns it: the key's
/// lookup and the read in one statement, for the confirm (one round trip and one pool
/// checkout fewer on a path every upload takes).
pub async fn find_by_key_hash(
    conn: &mut AsyncPgConnection,
    key_hash: &[u8],
    id: UploadId,
) -> QueryResult<Option<UploadRow>> {
    use crate::db::schema::users;
    uploads::table
        .inner_join(users::table)
        .filter(uploads::id.eq(id).and(users::api_key_hash.eq(key_hash)))
        .select(UploadRow::as_select())
        .first(conn)
        .await
        .optional()
}

/// The message of the error the confirm's fence raises (`vidq_fence`, migration 000016):
/// diesel does not surface SQLSTATEs, and this text is vidq's own.
pub const UPLOAD_NOT_OPEN_MESSAGE: &str = "vidq: the upload is not open";

/// CAS `pending|uploaded -> confirmed`, as a fence. Returns 1, or 0 when another confirm got
/// there first (the row lock makes a concurrent confirm wait, then re-check the state and
/// match nothing) or the contract is closed or gone. A fence that matches nothing also fails
/// the statement on the server (`vidq_fence`), so the transaction is failed there and
/// a `COMMIT` sent behind it in the same pipeline (`crate::db::pipelined`) rolls it back.
pub async fn mark_confirmed(mut conn: &AsyncPgConnection, id: UploadId) -> QueryResult<usize> {
    // One prepared text (diesel's `eq_any` over a list is re-planned on every call): every
    // confirm runs it.
    let answer = crate::db::prepared::prepared(format!(
        "WITH moved AS (
             UPDATE uploads SET state = '{confirmed}', updated_at = statement_timestamp()
              WHERE id = $1 AND state = '{pending}'
             RETURNING 1)
         SELECT vidq_fence(count(*), '{UPLOAD_NOT_OPEN_MESSAGE}') AS n FROM moved",
        confirmed = UploadState::Confirmed.as_str(),
        pending = UploadState::Pending.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .get_result::<crate::db::CountRow>(&mut conn)
    .await;
    crate::db::fence_answer(answer, UPLOAD_NOT_OPEN_MESSAGE)
}

/// [`mark_confirmed`] for several contracts in one statement; returns the ids it moved. The
/// rows are locked in id order, so two batches that share a contract cannot wait on each
/// other in a cycle: the later one waits, re-checks the state and leaves the contract out.
pub async fn mark_all_confirmed(
    mut conn: &AsyncPgConnection,
    ids: Vec<UploadId>,
) -> QueryResult<Vec<UploadId>> {
    let moved: Vec<crate::db::UuidRow> = crate::db::prepared::prepared(format!(
        "WITH open AS (
             SELECT id FROM uploads
              WHERE id = ANY($1) AND state = '{pending}'
              ORDER BY id FOR UPDATE)
         UPDATE uploads u SET state = '{confirmed}', updated_at = statement_timestamp()
           FROM open WHERE u.id = open.id
         RETURNING u.id",
        confirmed = UploadState::Confirmed.as_str(),
        pending = UploadState::Pending.as_str(),
    ))
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(ids)
    .load(&mut conn)
    .await?;
    Ok(moved.into_iter().map(|row| UploadId(row.id)).collect())
}

/// The contract's state, if it still exists (a confirm whose CAS matched nothing asks why).
pub async fn state_of(conn: &mut AsyncPgConnection, id: UploadId) -> QueryResult<Option<String>> {
    uploads::table
        .filter(uploads::id.eq(id))
        .select(uploads::state)
        .first(conn)
        .await
        .optional()
}

/// The id of the video made from the contract, if one was.
pub async fn video_of(conn: &mut AsyncPgConnection, id: UploadId) -> QueryResult<Option<VideoId>> {
    use crate::db::schema::videos;
    videos::table
        .filter(videos::upload_id.eq(id))
        .select(videos::id)
        .first(conn)
        .await
        .optional()
}

/// Deletes a contract (its video and job cascade with it).
pub async fn delete(conn: &mut AsyncPgConnection, id: UploadId) -> QueryResult<usize> {
    diesel::delete(uploads::table.filter(uploads::id.eq(id)))
        .execute(conn)
        .await
}

/// Locks up to `limit` of the owner's contracts `FOR UPDATE`, in id order, and returns their
/// ids and object keys: one page of a user's deletion.
pub async fn lock_page_of_owner(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    limit: i64,
) -> QueryResult<Vec<(UploadId, String)>> {
    uploads::table
        .filter(uploads::owner_id.eq(owner))
        .select((uploads::id, uploads::object_key))
        .order(uploads::id)
        .limit(limit)
        .for_update()
        .load(conn)
        .await
}

/// Deletes contracts; their videos, jobs, artifacts and attempts cascade with them.
pub async fn delete_many(conn: &mut AsyncPgConnection, ids: &[UploadId]) -> QueryResult<usize> {
    diesel::delete(uploads::table.filter(uploads::id.eq_any(ids)))
        .execute(conn)
        .await
}

/// Whether the owner has any contract left.
pub async fn any_of_owner(conn: &mut AsyncPgConnection, owner: UserId) -> QueryResult<bool> {
    diesel::select(diesel::dsl::exists(
        uploads::table.filter(uploads::owner_id.eq(owner)),
    ))
    .get_result(conn)
    .await
}
