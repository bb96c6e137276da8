//! The `recordings` row itself: created when a broadcast is set up, found by its stream key
//! or its owner, touched as files arrive, ended, deleted with its video.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Int4, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::schema::recordings;
use crate::domain::ids::{RecordingId, UserId};
use crate::domain::recording::{EndReason, RecordingState};

/// A `recordings` row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = recordings)]
pub struct RecordingRow {
    /// Primary key (UUIDv7).
    pub id: RecordingId,
    /// The broadcaster.
    pub owner_id: UserId,
    /// See [`RecordingState`].
    pub state: RecordingState,
    /// The node whose spool holds its files.
    pub node_id: String,
    /// See [`EndReason`].
    pub end_reason: Option<EndReason>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// Files arriving after this are excluded.
    pub cutoff_at: Option<DateTime<Utc>>,
    /// The last segment the final playlist named.
    pub final_sequence: Option<i32>,
    /// The last file or playlist it received.
    pub last_ingest_at: Option<DateTime<Utc>>,
    /// The encoder's first segment number, from its first playlist.
    pub first_sequence: Option<i32>,
    /// The encoder's `#EXT-X-TARGETDURATION`, from its first playlist.
    pub target_duration_secs: Option<i32>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Files that arrived whole but could not be recorded: the database stayed away past
    /// `VIDQ_LIVE_DB_PATIENCE_SECS`.
    pub lost_files: i32,
}

/// Records a new recording, `waiting`, spooled on `node`.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    id: RecordingId,
    owner: UserId,
    stream_key_hash: &[u8],
    node: &str,
) -> QueryResult<RecordingRow> {
    diesel::insert_into(recordings::table)
        .values((
            recordings::id.eq(id),
            recordings::owner_id.eq(owner),
            recordings::stream_key_hash.eq(stream_key_hash),
            recordings::node_id.eq(node),
        ))
        .returning(RecordingRow::as_returning())
        .get_result(conn)
        .await
}

/// The recording an ingest URL's stream key names.
pub async fn by_stream_key(
    conn: &mut AsyncPgConnection,
    hash: &[u8],
) -> QueryResult<Option<RecordingRow>> {
    recordings::table
        .filter(recordings::stream_key_hash.eq(hash))
        .select(RecordingRow::as_select())
        .first(conn)
        .await
        .optional()
}

/// The recording, only if `owner` holds it.
pub async fn find_owned(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    id: RecordingId,
) -> QueryResult<Option<RecordingRow>> {
    recordings::table
        .filter(recordings::id.eq(id).and(recordings::owner_id.eq(owner)))
        .select(RecordingRow::as_select())
        .first(conn)
        .await
        .optional()
}

/// Notes that something arrived: `waiting -> live` on the first file, and the time of the
/// last one (the idle end counts from it).
pub async fn touch(conn: &mut AsyncPgConnection, id: RecordingId) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE recordings
            SET state = CASE WHEN state = '{waiting}' THEN '{live}' ELSE state END,
                last_ingest_at = statement_timestamp(), updated_at = statement_timestamp()
          WHERE id = $1",
        waiting = RecordingState::Waiting.as_str(),
        live = RecordingState::Live.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .execute(conn)
    .await
}

/// CAS `waiting|live -> ending`: the end, with its reason, the cutoff `grace_secs` later
/// (by the database clock), and the last segment number if the final playlist named one.
/// 0 when it had ended already.
pub async fn end(
    conn: &mut AsyncPgConnection,
    id: RecordingId,
    reason: EndReason,
    final_sequence: Option<i32>,
    grace_secs: f64,
) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE recordings
            SET state = '{ending}', end_reason = $2, ended_at = statement_timestamp(),
                cutoff_at = statement_timestamp() + make_interval(secs => $3),
                final_sequence = COALESCE($4, final_sequence),
                updated_at = statement_timestamp()
          WHERE id = $1 AND state IN ('{waiting}', '{live}')",
        ending = RecordingState::Ending.as_str(),
        waiting = RecordingState::Waiting.as_str(),
        live = RecordingState::Live.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .bind::<Text, _>(reason.as_str())
    .bind::<diesel::sql_types::Double, _>(grace_secs)
    .bind::<Nullable<Int4>, _>(final_sequence)
    .execute(conn)
    .await
}

/// Deletes a recording and (cascading) its file rows: its video is being deleted.
pub async fn delete(conn: &mut AsyncPgConnection, id: RecordingId) -> QueryResult<usize> {
    diesel::delete(recordings::table.filter(recordings::id.eq(id)))
        .execute(conn)
        .await
}

/// The recording, whoever holds it (a playback token authorizes the reader).
pub async fn find(
    conn: &mut AsyncPgConnection,
    id: RecordingId,
) -> QueryResult<Option<RecordingRow>> {
    recordings::table
        .filter(recordings::id.eq(id))
        .select(RecordingRow::as_select())
        .first(conn)
        .await
        .optional()
}

/// One more file of the recording arrived whole and was lost (`segments.lost`).
pub async fn add_lost_file(conn: &mut AsyncPgConnection, id: RecordingId) -> QueryResult<usize> {
    diesel::update(recordings::table.find(id))
        .set(recordings::lost_files.eq(recordings::lost_files + 1))
        .execute(conn)
        .await
}
