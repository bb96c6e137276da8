//! The ledger of `s3`-store uploads while their bytes arrive (`tus_multiparts`, `tus_parts`,
//! `tus_tail_pieces`, next to the `uploads` row): the multipart upload, the request that holds
//! it (a lease with a token, and the S3 part numbers it reserved), the parts landed and the
//! tail pieces past the last part. The offset is the `uploads` row's `received_bytes`,
//! moved by a CAS only after the bytes it counts are stored. Lock order (`db/mod.rs`): the
//! `uploads` row, then its multipart row, then parts and pieces.

use diesel::sql_types::{BigInt, Bool, Int4, Nullable, Text};
use diesel::{OptionalExtension, QueryableByName};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::NewUploadRow;
use crate::domain::ids::{RequestToken, UploadId, UserId};
use crate::domain::upload::{UploadState, UploadStore, UploadVia};

/// How long a request holds an upload without renewing: a request renews while its bytes
/// move, so a dead node's (or a stalled client's) hold ends within this.
pub const LEASE_SECS: f64 = 15.0;

/// A part landed in S3.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct Part {
    /// Where in the file it starts.
    #[diesel(sql_type = BigInt)]
    pub start_offset: i64,
    /// Its S3 part number.
    #[diesel(sql_type = Int4)]
    pub part_number: i32,
    /// Its size.
    #[diesel(sql_type = BigInt)]
    pub size_bytes: i64,
    /// The ETag S3 gave it.
    #[diesel(sql_type = Text)]
    pub etag: String,
}

/// A tail piece: bytes past the last part, stored as an object of their own.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct TailPiece {
    /// Where in the file it starts.
    #[diesel(sql_type = BigInt)]
    pub start_offset: i64,
    /// Its size.
    #[diesel(sql_type = BigInt)]
    pub size_bytes: i64,
    /// Its object.
    #[diesel(sql_type = Text)]
    pub object_key: String,
}

/// Registers an `s3`-store upload (`receiving`, 0 bytes) and its multipart upload, created
/// in S3 before this commits.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    new: &NewUploadRow<'_>,
    multipart_id: &str,
    part_bytes: i64,
) -> diesel::QueryResult<()> {
    conn.transaction(async |conn| {
        use crate::db::schema::uploads::dsl;
        use diesel::ExpressionMethods;
        diesel::insert_into(dsl::uploads)
            .values((
                new,
                dsl::state.eq(UploadState::Receiving.as_str()),
                dsl::via.eq(UploadVia::Vidq.as_str()),
                dsl::received_bytes.eq(0),
                dsl::store.eq(UploadStore::S3.as_str()),
            ))
            .execute(conn)
            .await?;
        diesel::sql_query(
            "INSERT INTO tus_multiparts (upload_id, multipart_id, part_bytes) VALUES ($1, $2, $3)",
        )
        .bind::<diesel::sql_types::Uuid, _>(new.id)
        .bind::<Text, _>(multipart_id)
        .bind::<BigInt, _>(part_bytes)
        .execute(conn)
        .await?;
        Ok(())
    })
    .await
}

/// What a request holds once it has the upload.
#[derive(Debug, Clone)]
pub struct Lease {
    /// S3's id of the multipart upload.
    pub multipart_id: String,
    /// The size of a part (all but the file's last).
    pub part_bytes: i64,
    /// The first of the part numbers reserved for this request.
    pub first_number: i32,
    /// Where the tail starts (the end of the last part).
    pub parts_end: i64,
    /// The tail pieces, in file order.
    pub tail: Vec<TailPiece>,
}

/// Why a request did not get the upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotLeased {
    /// Another request holds it (until its lease ends or a HEAD takes it over).
    Held,
    /// Its offset is not `offset`, it is no longer `receiving`, or it has no multipart row:
    /// the caller reads the row to say which.
    Moved,
    /// The S3 part numbers are used up (10,000): too many failed requests.
    NumbersExhausted,
}

/// Takes the upload for the request `token` if it is `receiving` at `offset` and nobody
/// holds it (or the holder's lease ended), reserving `numbers` part numbers; a lease of
/// [`LEASE_SECS`].
pub async fn lease(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    offset: i64,
    token: RequestToken,
    numbers: i32,
) -> diesel::QueryResult<Result<Lease, NotLeased>> {
    conn.transaction(async |conn| {
        let taken = take(conn, id, offset, token, numbers).await?;
        let (Some(multipart_id), Some(part_bytes), Some(first_number)) =
            (taken.multipart_id, taken.part_bytes, taken.first_number)
        else {
            return Ok(Err(if taken.held {
                NotLeased::Held
            } else if taken.exhausted {
                NotLeased::NumbersExhausted
            } else {
                NotLeased::Moved
            }));
        };
        let parts_end: i64 = diesel::sql_query(
            "SELECT COALESCE(sum(size_bytes), 0)::int8 AS n FROM tus_parts WHERE upload_id = $1",
        )
        .bind::<diesel::sql_types::Uuid, _>(id)
        .get_result::<crate::db::CountRow>(conn)
        .await?
        .n;
        let tail = tail_of(conn, id).await?;
        Ok(Ok(Lease {
            multipart_id,
            part_bytes,
            first_number,
            parts_end,
            tail,
        }))
    })
    .await
}

/// What the lease statement found: the lease, or why not (another holds it, the numbers
/// are used up; neither: the upload has moved on).
#[derive(QueryableByName)]
struct Taken {
    #[diesel(sql_type = Nullable<Text>)]
    multipart_id: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    part_bytes: Option<i64>,
    #[diesel(sql_type = Nullable<Int4>)]
    first_number: Option<i32>,
    #[diesel(sql_type = Bool)]
    held: bool,
    #[diesel(sql_type = Bool)]
    exhausted: bool,
}

/// The lease statement: the upload row first (lock order), then its multipart row, taken if
/// nobody holds it and enough part numbers are left.
async fn take(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    offset: i64,
    token: RequestToken,
    numbers: i32,
) -> diesel::QueryResult<Taken> {
    // The upload row first (lock order), read at the offset the client claims.
    diesel::sql_query(format!(
        "WITH upload AS (
             SELECT id FROM uploads
              WHERE id = $1 AND state = '{receiving}' AND received_bytes = $2
              FOR UPDATE),
         current AS (
             SELECT m.* FROM tus_multiparts m JOIN upload u ON u.id = m.upload_id
              FOR UPDATE OF m),
         taken AS (
             UPDATE tus_multiparts m
                SET lease_token = $3,
                    lease_until = statement_timestamp() + make_interval(secs => $5),
                    next_part = m.next_part + $4
               FROM current c
              WHERE m.upload_id = c.upload_id
                AND (c.lease_until IS NULL OR c.lease_until < statement_timestamp())
                AND c.next_part + $4 <= 10001
             RETURNING m.multipart_id, m.part_bytes, c.next_part AS first_number)
         SELECT t.multipart_id, t.part_bytes, t.first_number,
                EXISTS (SELECT 1 FROM current
                         WHERE lease_until >= statement_timestamp()) AS held,
                EXISTS (SELECT 1 FROM current WHERE next_part + $4 > 10001) AS exhausted
           FROM (SELECT 1) one LEFT JOIN taken t ON true",
        receiving = UploadState::Receiving.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<BigInt, _>(offset)
    .bind::<diesel::sql_types::Uuid, _>(token)
    .bind::<Int4, _>(numbers)
    .bind::<diesel::sql_types::Double, _>(LEASE_SECS)
    .get_result(conn)
    .await
}

/// Reserves `numbers` more part numbers for the request `token`; the first, or `None` when
/// it no longer holds the upload or the numbers are used up.
pub async fn reserve(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    token: RequestToken,
    numbers: i32,
) -> diesel::QueryResult<Option<i32>> {
    #[derive(QueryableByName)]
    struct First {
        #[diesel(sql_type = Int4)]
        first: i32,
    }
    let first: Option<First> = diesel::sql_query(
        "UPDATE tus_multiparts SET next_part = next_part + $3
          WHERE upload_id = $1 AND lease_token = $2 AND next_part + $3 <= 10001
         RETURNING next_part - $3 AS first",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<diesel::sql_types::Uuid, _>(token)
    .bind::<Int4, _>(numbers)
    .get_result(conn)
    .await
    .optional()?;
    Ok(first.map(|f| f.first))
}

/// Extends the lease of the request `token`; `false` when it no longer holds the upload (a
/// HEAD took it over, or it ended and another request took it).
pub async fn renew(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    token: RequestToken,
) -> diesel::QueryResult<bool> {
    let n = diesel::sql_query(
        "UPDATE tus_multiparts
            SET lease_until = statement_timestamp() + make_interval(secs => $3)
          WHERE upload_id = $1 AND lease_token = $2",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<diesel::sql_types::Uuid, _>(token)
    .bind::<diesel::sql_types::Double, _>(LEASE_SECS)
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Lets go of the upload (the request `token` is done); nothing if it no longer holds it.
pub async fn release(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    token: RequestToken,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(
        "UPDATE tus_multiparts SET lease_token = NULL, lease_until = NULL
          WHERE upload_id = $1 AND lease_token = $2",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<diesel::sql_types::Uuid, _>(token)
    .execute(conn)
    .await
}

/// Ends whatever request holds the upload (a tus HEAD: the client is about to resume, so
/// the request it left behind is dead to it). That request's next CAS or renewal fails; its
/// part numbers stay its own, so nothing it still writes can land under a counted part.
pub async fn take_over(conn: &mut AsyncPgConnection, id: UploadId) -> diesel::QueryResult<usize> {
    diesel::sql_query(
        "UPDATE tus_multiparts SET lease_token = NULL, lease_until = NULL
          WHERE upload_id = $1 AND lease_token IS NOT NULL",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .execute(conn)
    .await
}

/// What a request stored and now counts.
#[derive(Debug, Clone, Default)]
pub struct Stored {
    /// Parts landed, in file order.
    pub parts: Vec<Part>,
    /// The tail pieces the first of them took in (they end before it does).
    pub took_tail: bool,
    /// A new tail piece, after the parts.
    pub piece: Option<TailPiece>,
}

/// The CAS that counts stored bytes: while the request `token` holds the upload and its
/// offset is `from`, records `stored` and moves the offset to `to`; with `complete`, also
/// `receiving -> pending` (every byte is in S3's parts: the multipart upload may be
/// completed). `false`: the lease was lost or the upload closed meanwhile, nothing counted.
pub async fn count(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    token: RequestToken,
    (from, to): (i64, i64),
    complete: bool,
    stored: &Stored,
) -> diesel::QueryResult<bool> {
    let counted = conn
        .transaction(async |conn| {
            let moved = diesel::sql_query(format!(
                "UPDATE uploads
                    SET received_bytes = $3,
                        state = CASE WHEN $4 THEN '{pending}' ELSE state END,
                        updated_at = statement_timestamp()
                  WHERE id = $1 AND state = '{receiving}' AND received_bytes = $2",
                pending = UploadState::Pending.as_str(),
                receiving = UploadState::Receiving.as_str(),
            ))
            .bind::<diesel::sql_types::Uuid, _>(id)
            .bind::<BigInt, _>(from)
            .bind::<BigInt, _>(to)
            .bind::<Bool, _>(complete)
            .execute(conn)
            .await?;
            // Then the lease, under the upload row's lock (lock order): a HEAD that took the
            // upload over meanwhile makes this count nothing.
            let held = renew(conn, id, token).await?;
            if moved == 0 || !held {
                return Err(diesel::result::Error::RollbackTransaction);
            }
            record(conn, id, stored).await
        })
        .await;
    match counted {
        Ok(()) => Ok(true),
        Err(diesel::result::Error::RollbackTransaction) => Ok(false),
        Err(error) => Err(error),
    }
}

/// The rows of what [`count`] counts.
async fn record(
    conn: &mut AsyncPgConnection,
    id: UploadId,
    stored: &Stored,
) -> diesel::QueryResult<()> {
    if stored.took_tail {
        diesel::sql_query("DELETE FROM tus_tail_pieces WHERE upload_id = $1")
            .bind::<diesel::sql_types::Uuid, _>(id)
            .execute(conn)
            .await?;
    }
    for part in &stored.parts {
        diesel::sql_query(
            "INSERT INTO tus_parts (upload_id, start_offset, part_number, size_bytes, etag)
                 VALUES ($1, $2, $3, $4, $5)",
        )
        .bind::<diesel::sql_types::Uuid, _>(id)
        .bind::<BigInt, _>(part.start_offset)
        .bind::<Int4, _>(part.part_number)
        .bind::<BigInt, _>(part.size_bytes)
        .bind::<Text, _>(&part.etag)
        .execute(conn)
        .await?;
    }
    if let Some(piece) = &stored.piece {
        diesel::sql_query(
            "INSERT INTO tus_tail_pieces (upload_id, start_offset, size_bytes, object_key)
                 VALUES ($1, $2, $3, $4)",
        )
        .bind::<diesel::sql_types::Uuid, _>(id)
        .bind::<BigInt, _>(piece.start_offset)
        .bind::<BigInt, _>(piece.size_bytes)
        .bind::<Text, _>(&piece.object_key)
        .execute(conn)
        .await?;
    }
    Ok(())
}

/// The tail pieces, in file order.
pub async fn tail_of(
    conn: &mut AsyncPgConnection,
    id: UploadId,
) -> diesel::QueryResult<Vec<TailPiece>> {
    diesel::sql_query(
        "SELECT start_offset, size_bytes, object_key FROM tus_tail_pieces
          WHERE upload_id = $1 ORDER BY start_offset",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .load(conn)
    .await
}

/// A multipart upload, with its parts in file order (to complete it) or its key (to abort
/// it).
#[derive(Debug, Clone)]
pub struct Multipart {
    /// S3's id of it.
    pub multipart_id: String,
    /// Parts landed, in file order.
    pub parts: Vec<Part>,
}

/// The upload's multipart upload and parts; `None` once it is gone (completed or dropped).
pub async fn multipart_of(
    conn: &mut AsyncPgConnection,
    id: UploadId,
) -> diesel::QueryResult<Option<Multipart>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        multipart_id: String,
    }
    let row: Option<Row> =
        diesel::sql_query("SELECT multipart_id FROM tus_multiparts WHERE upload_id = $1")
            .bind::<diesel::sql_types::Uuid, _>(id)
            .get_result(conn)
            .await
            .optional()?;
    let Some(row) = row else { return Ok(None) };
    let parts = diesel::sql_query(
        "SELECT start_offset, part_number, size_bytes, etag FROM tus_parts
          WHERE upload_id = $1 ORDER BY start_offset",
    )
    .bind::<diesel::sql_types::Uuid, _>(id)
    .load(conn)
    .await?;
    Ok(Some(Multipart {
        multipart_id: row.multipart_id,
        parts,
    }))
}

/// Forgets the multipart rows of an upload that no longer needs them (completed, or
/// aborted in S3).
pub async fn forget(conn: &mut AsyncPgConnection, id: UploadId) -> diesel::QueryResult<usize> {
    diesel::sql_query("DELETE FROM tus_multiparts WHERE upload_id = $1")
        .bind::<diesel::sql_types::Uuid, _>(id)
        .execute(conn)
        .await
}

/// An `s3`-store upload whose multipart upload is to be aborted.
#[derive(Debug, Clone, QueryableByName)]
pub struct Dropped {
    /// The contract.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub upload_id: UploadId,
    /// Its final key.
    #[diesel(sql_type = Text)]
    pub object_key: String,
    /// S3's id of its multipart upload.
    #[diesel(sql_type = Text)]
    pub multipart_id: String,
}

/// The multipart uploads of `owner`'s `s3`-store uploads still arriving (the user is being
/// deleted: S3 would keep their parts once the rows are gone).
pub async fn of_owner(
    conn: &mut AsyncPgConnection,
    owner: UserId,
) -> diesel::QueryResult<Vec<Dropped>> {
    diesel::sql_query(
        "SELECT u.id AS upload_id, u.object_key, m.multipart_id
           FROM tus_multiparts m JOIN uploads u ON u.id = m.upload_id
          WHERE u.owner_id = $1 ORDER BY u.id",
    )
    .bind::<diesel::sql_types::Uuid, _>(owner)
    .load(conn)
    .await
}

/// CAS `receiving -> expired` for up to `limit` `s3`-store uploads past `expires_at` (any
/// node's: none holds them), and those whose multipart upload is still to be aborted (a
/// termination, or an expiry whose abort failed); skips rows another node is at.
pub async fn expire_due(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Vec<Dropped>> {
    diesel::sql_query(format!(
        "WITH page AS (
             SELECT u.id FROM tus_multiparts m JOIN uploads u ON u.id = m.upload_id
              WHERE (u.state = '{receiving}' AND u.expires_at < statement_timestamp())
                 OR u.state IN ('{expired}', '{rejected}')
              ORDER BY u.id LIMIT $1
              FOR UPDATE OF u SKIP LOCKED),
         moved AS (
             UPDATE uploads u SET state = '{expired}', updated_at = statement_timestamp()
               FROM page WHERE u.id = page.id AND u.state = '{receiving}')
         SELECT u.id AS upload_id, u.object_key, m.multipart_id
           FROM page JOIN uploads u ON u.id = page.id
           JOIN tus_multiparts m ON m.upload_id = page.id",
        receiving = UploadState::Receiving.as_str(),
        expired = UploadState::Expired.as_str(),
        rejected = UploadState::Rejected.as_str(),
    ))
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}
