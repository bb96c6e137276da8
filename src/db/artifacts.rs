//! The artifact ledger: a row per output object, `pending` before its PUT, `uploaded` after a
//! compare-and-set on state and size.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::video_artifacts;
use crate::domain::artifact::ArtifactState;

/// A `video_artifacts` row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = video_artifacts)]
pub struct ArtifactRow {
    /// Primary key.
    pub id: i64,
    /// Owning video.
    pub video_id: Uuid,
    /// Attempt whose prefix holds it.
    pub attempt: i32,
    /// See [`Axis`](crate::domain::artifact::Axis).
    pub axis: String,
    /// Order within the axis (segment number).
    pub sequence: i32,
    /// S3 key.
    pub object_key: String,
    /// Expected size.
    pub size_bytes: i64,
    /// `pending | uploaded`.
    pub state: String,
    /// Registered.
    pub created_at: DateTime<Utc>,
    /// Confirmed in S3.
    pub uploaded_at: Option<DateTime<Utc>>,
}

/// An object about to be uploaded.
#[derive(Debug, Insertable)]
#[diesel(table_name = video_artifacts)]
pub struct NewArtifact<'a> {
    /// Owning video.
    pub video_id: Uuid,
    /// Attempt.
    pub attempt: i32,
    /// Axis.
    pub axis: &'a str,
    /// Order within the axis.
    pub sequence: i32,
    /// S3 key.
    pub object_key: &'a str,
    /// Size of the local file.
    pub size_bytes: i64,
}

/// Registers objects as `pending` before any PUT. Re-registering a key (the same attempt
/// number after a graceful release) resets it to `pending` with the new size: the object is
/// about to be overwritten.
pub async fn register_pending(
    conn: &mut AsyncPgConnection,
    rows: &[NewArtifact<'_>],
) -> QueryResult<usize> {
    use diesel::upsert::excluded;
    diesel::insert_into(video_artifacts::table)
        .values(rows)
        .on_conflict(video_artifacts::object_key)
        .do_update()
        .set((
            video_artifacts::size_bytes.eq(excluded(video_artifacts::size_bytes)),
            video_artifacts::state.eq(ArtifactState::Pending.as_str()),
            video_artifacts::uploaded_at.eq(None::<DateTime<Utc>>),
        ))
        .execute(conn)
        .await
}

/// CAS `pending -> uploaded`, only if the size S3 reports is the size registered. Zero rows
/// means the ledger disagrees (another size, already confirmed, or the video is gone).
pub async fn mark_uploaded(
    conn: &mut AsyncPgConnection,
    key: &str,
    size: i64,
) -> QueryResult<usize> {
    diesel::update(
        video_artifacts::table.filter(
            video_artifacts::object_key
                .eq(key)
                .and(video_artifacts::state.eq(ArtifactState::Pending.as_str()))
                .and(video_artifacts::size_bytes.eq(size)),
        ),
    )
    .set((
        video_artifacts::state.eq(ArtifactState::Uploaded.as_str()),
        video_artifacts::uploaded_at.eq(diesel::dsl::sql::<
            diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>,
        >("clock_timestamp()")),
    ))
    .execute(conn)
    .await
}

/// Every artifact of one attempt, in upload order.
pub async fn of_attempt(
    conn: &mut AsyncPgConnection,
    video: Uuid,
    attempt: i32,
) -> QueryResult<Vec<ArtifactRow>> {
    video_artifacts::table
        .filter(
            video_artifacts::video_id
                .eq(video)
                .and(video_artifacts::attempt.eq(attempt)),
        )
        .select(ArtifactRow::as_select())
        .order(video_artifacts::id)
        .load(conn)
        .await
}
