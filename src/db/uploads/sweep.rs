//! The upload ledger's statements for the sweeper: claim a page of due rows through the
//! cursor, record a failed try, reject for good, release claims, expire lapsed presigned
//! contracts. Only `uploads` rows are locked here (lock order step 2 in `db/mod.rs`).

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Double, Int4, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::NewUploadRow;
use crate::domain::ids::{UploadId, UserId};
use crate::domain::upload::{RejectReason, UploadState, UploadVia};

/// A pending row claimed by this node's sweeper.
#[derive(Debug, Clone, QueryableByName)]
pub struct ClaimedUpload {
    /// The contract.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: UploadId,
    /// The uploader.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub owner_id: UserId,
    /// The contracted key.
    #[diesel(sql_type = Text)]
    pub object_key: String,
    /// Content type of the PUT.
    #[diesel(sql_type = Text)]
    pub content_type: String,
    /// Size the object must have.
    #[diesel(sql_type = BigInt)]
    pub declared_size: i64,
    /// Spool file, relative to the root (as written; checked before any use).
    #[diesel(sql_type = Nullable<Text>)]
    pub spool_path: Option<String>,
    /// Failed tries so far.
    #[diesel(sql_type = Int4)]
    pub tries: i32,
}

/// Claims up to `limit` due pending rows of `node` uploaded through vidq with an id above
/// `after` (`None`: from the start), in id order, for `lease_secs`: rows another sweeper
/// holds (row lock or unexpired claim) or whose next try is later are skipped. One
/// statement, so the read and the claim cannot be separated by another sweeper.
pub async fn claim_page(
    conn: &mut AsyncPgConnection,
    node: &str,
    after: Option<UploadId>,
    limit: i64,
    lease_secs: f64,
) -> diesel::QueryResult<Vec<ClaimedUpload>> {
    let sql = format!(
        "WITH page AS (
             SELECT id FROM uploads
              WHERE id > $1 AND state = '{pending}' AND via = '{vidq}' AND node_id = $2
                AND (next_try_at IS NULL OR next_try_at <= statement_timestamp())
                AND (claimed_until IS NULL OR claimed_until < statement_timestamp())
              ORDER BY id LIMIT $3
              FOR UPDATE SKIP LOCKED)
         UPDATE uploads u
            SET claimed_until = statement_timestamp() + make_interval(secs => $4)
           FROM page WHERE u.id = page.id
         RETURNING u.id, u.owner_id, u.object_key, u.content_type, u.declared_size,
                   u.spool_path, u.tries",
        pending = UploadState::Pending.as_str(),
        vidq = UploadVia::Vidq.as_str(),
    );
    let mut rows: Vec<ClaimedUpload> = diesel::sql_query(sql)
        .bind::<diesel::sql_types::Uuid, _>(after.unwrap_or(UploadId(Uuid::nil())))
        .bind::<Text, _>(node)
        .bind::<BigInt, _>(limit)
        .bind::<Double, _>(lease_secs)
        .load(conn)
        .await?;
    // RETURNING keeps no order; the cursor needs id order.
    rows.sort_by_key(|r| r.id);
    Ok(rows)
}

/// Gives claims back without a try (the queue was full, the breaker open): the rows are
/// due again at once, for this sweeper's next round or another's.
pub async fn release(conn: &mut AsyncPgConnection, ids: &[UploadId]) -> diesel::QueryResult<usize> {
    if ids.is_empty() {
        return Ok(0);
    }
    diesel::sql_query(format!(
        "UPDATE uploads SET claimed_until = NULL WHERE id = ANY($1) AND state = '{}'",
        UploadState::Pending.as_str()
    ))
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(ids)
    .execute(conn)
    .await
}

/// Records a failed try: one more try, the next one not before `delay_secs` from now by
/// the database clock, the error, and the claim released. Only while the row is pending.
pub async fn record_failure(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    delay_secs: f64,
    error: &str,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE uploads SET tries = tries + 1,
                next_try_at = statement_timestamp() + make_interval(secs => $2), last_error = $3,
                claimed_until = NULL, updated_at = statement_timestamp()
          WHERE id = $1 AND state = '{}'",
        UploadState::Pending.as_str()
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<Double, _>(delay_secs)
    .bind::<Text, _>(error)
    .execute(conn)
    .await
}

/// CAS `pending -> rejected` with its reason: never PUT, never tried again.
pub async fn reject(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    reason: RejectReason,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE uploads SET state = '{rejected}', reject_reason = $2, claimed_until = NULL,
                updated_at = statement_timestamp()
          WHERE id = $1 AND state = '{pending}'",
        rejected = UploadState::Rejected.as_str(),
        pending = UploadState::Pending.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<Text, _>(reason.as_str())
    .execute(conn)
    .await
}

/// A presigned contract the sweeper expired.
#[derive(Debug, Clone, QueryableByName)]
pub struct ExpiredUpload {
    /// The contract.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: UploadId,
    /// Its key, whose object (if the client PUT one) is to be deleted.
    #[diesel(sql_type = Text)]
    pub object_key: String,
}

/// CAS `pending -> expired` for up to `limit` presigned contracts past `expires_at` (by
/// the database clock), in one statement. A confirm that comes later, or that was between
/// its HEAD and its CAS, finds the contract closed (`409 upload_closed`). Rows a confirm
/// holds are skipped and looked at again next time.
pub async fn expire_presigned(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Vec<ExpiredUpload>> {
    diesel::sql_query(format!(
        "WITH page AS (
             SELECT id FROM uploads
              WHERE state = '{pending}' AND via = '{presigned}'
                AND expires_at < statement_timestamp()
              ORDER BY id LIMIT $1
              FOR UPDATE SKIP LOCKED)
         UPDATE uploads u SET state = '{expired}', updated_at = statement_timestamp()
           FROM page WHERE u.id = page.id
         RETURNING u.id, u.object_key",
        pending = UploadState::Pending.as_str(),
        presigned = UploadVia::Presigned.as_str(),
        expired = UploadState::Expired.as_str(),
    ))
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}

/// A new upload through vidq, as tus or the single PUT will register it (today: tests and
/// `vidq bench sweeper`): a contract like any other, plus where its bytes are spooled.
#[derive(Debug)]
pub struct NewVidqUpload<'a> {
    /// The contract's own fields (its `expires_at`: when an unfinished upload may be dropped).
    pub contract: NewUploadRow<'a>,
    /// Spool file, relative to the root.
    pub spool_path: &'a str,
    /// Node holding the spool.
    pub node_id: &'a str,
}

/// Registers a complete upload through vidq as a `pending` ledger row (all bytes received):
/// the row exists before any PUT, so a crash at any later point leaves it to the sweeper.
pub async fn insert_pending(
    conn: &mut AsyncPgConnection,
    new: &NewVidqUpload<'_>,
) -> diesel::QueryResult<usize> {
    use crate::db::schema::uploads::dsl;
    use diesel::ExpressionMethods;
    diesel::insert_into(dsl::uploads)
        .values((
            &new.contract,
            dsl::state.eq(UploadState::Pending.as_str()),
            dsl::via.eq(UploadVia::Vidq.as_str()),
            dsl::received_bytes.eq(new.contract.declared_size),
            dsl::spool_path.eq(new.spool_path),
            dsl::node_id.eq(new.node_id),
            dsl::store.eq(crate::domain::upload::UploadStore::Spool.as_str()),
        ))
        .execute(conn)
        .await
}

/// What the ledger says of one row (tests, the bench, and later the status API).
#[derive(Debug, Clone, QueryableByName)]
pub struct LedgerEntry {
    /// State.
    #[diesel(sql_type = Text)]
    pub state: crate::domain::upload::UploadState,
    /// Reject reason.
    #[diesel(sql_type = Nullable<Text>)]
    pub reject_reason: Option<crate::domain::upload::RejectReason>,
    /// Failed tries.
    #[diesel(sql_type = Int4)]
    pub tries: i32,
    /// Last error.
    #[diesel(sql_type = Nullable<Text>)]
    pub last_error: Option<String>,
}

/// The ledger fields of one contract.
pub async fn entry(conn: &mut AsyncPgConnection, id: UploadId) -> diesel::QueryResult<LedgerEntry> {
    diesel::sql_query("SELECT state, reject_reason, tries, last_error FROM uploads WHERE id = $1")
        .bind::<diesel::sql_types::Uuid, _>(id)
        .get_result(conn)
        .await
}
