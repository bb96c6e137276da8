//! From a finished recording to its video: which recordings of a node are whole (and which
//! can never be), the lock and links of the transaction that makes the video, and the files
//! its repackage job reads from S3. Lock order (`db/mod.rs`): a recording row after `users`
//! and `videos`, before `video_encoding_jobs`; its file rows after it.

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{OptionalExtension, QueryableByName};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::domain::ids::{RecordingId, UserId, VideoId};
use crate::domain::recording::{FileAxis, FileState, RecordingState};

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: Uuid,
}

/// Of a recording `r`: it has no video yet and none of its files is still owed to S3.
fn settled() -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM videos v WHERE v.recording_id = r.id)
         AND NOT EXISTS (SELECT 1 FROM recording_files f
                          WHERE f.recording_id = r.id AND f.state = '{pending}')",
        pending = FileState::Pending.as_str(),
    )
}

/// Of a recording `r`: S3 holds its init and at least one segment.
fn playable() -> String {
    let holds = |axis: FileAxis| {
        format!(
            "EXISTS (SELECT 1 FROM recording_files f WHERE f.recording_id = r.id
                        AND f.axis = '{}' AND f.state = '{}')",
            axis.as_str(),
            FileState::Uploaded.as_str()
        )
    };
    format!(
        "({} AND {})",
        holds(FileAxis::Init),
        holds(FileAxis::Segment)
    )
}

/// A recording that can become a video, with its owner.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct WholeRecording {
    /// The recording.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: RecordingId,
    /// Its broadcaster.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub owner_id: UserId,
}

/// `node`'s ended recordings without a video whose files are all settled (nothing
/// `pending`), with the init and at least one segment in S3: each can become a video now.
pub async fn whole(
    conn: &mut AsyncPgConnection,
    node: &str,
) -> diesel::QueryResult<Vec<WholeRecording>> {
    diesel::sql_query(format!(
        "SELECT r.id, r.owner_id FROM recordings r
          WHERE r.node_id = $1 AND r.state = '{ended}'
            AND {settled} AND {playable}
          ORDER BY r.id LIMIT 100",
        ended = RecordingState::Ended.as_str(),
        settled = settled(),
        playable = playable(),
    ))
    .bind::<Text, _>(node)
    .load(conn)
    .await
}

/// CAS `ended -> failed` for `node`'s ended recordings without a video whose files are
/// settled but lack an init or any segment in S3 (the encoder sent none, or they were
/// refused at the file boundary): nothing playable can be made. Returns their ids.
pub async fn fail_unplayable(
    conn: &mut AsyncPgConnection,
    node: &str,
) -> diesel::QueryResult<Vec<RecordingId>> {
    let rows: Vec<Id> = diesel::sql_query(format!(
        "UPDATE recordings r SET state = '{failed}', updated_at = statement_timestamp()
          WHERE r.node_id = $1 AND r.state = '{ended}'
            AND {settled} AND NOT {playable}
         RETURNING r.id",
        failed = RecordingState::Failed.as_str(),
        ended = RecordingState::Ended.as_str(),
        settled = settled(),
        playable = playable(),
    ))
    .bind::<Text, _>(node)
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| RecordingId(r.id)).collect())
}

/// Locks an ended recording that has no video yet `FOR UPDATE` (after its owner, lock
/// order); `false` when it has a video already (another sweeper made it) or is not `ended`.
pub async fn lock_for_video(
    conn: &mut AsyncPgConnection,
    recording: RecordingId,
) -> diesel::QueryResult<bool> {
    let row: Option<Id> = diesel::sql_query(format!(
        "SELECT id FROM recordings r
          WHERE r.id = $1 AND r.state = '{ended}'
            AND NOT EXISTS (SELECT 1 FROM videos v WHERE v.recording_id = r.id)
          FOR UPDATE",
        ended = RecordingState::Ended.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(recording)
    .get_result(conn)
    .await
    .optional()?;
    Ok(row.is_some())
}

/// The recording's state follows its video's end, in the finalize's transaction: `ended ->
/// ready` or `ended -> failed`. 0 rows for a video made from an upload.
pub async fn follow_video(
    mut conn: &AsyncPgConnection,
    video: VideoId,
    state: RecordingState,
) -> diesel::QueryResult<usize> {
    crate::db::prepared::prepared(format!(
        "UPDATE recordings SET state = $2, updated_at = statement_timestamp()
          WHERE id = (SELECT recording_id FROM videos WHERE id = $1)
            AND state IN ('{ended}', '{ready}', '{failed}')",
        ended = RecordingState::Ended.as_str(),
        ready = RecordingState::Ready.as_str(),
        failed = RecordingState::Failed.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(video)
    .bind::<Text, _>(state.as_str())
    .execute(&mut conn)
    .await
}

/// Up to `limit` of `owner`'s recordings, in id order (a user deletion's page).
pub async fn page_of_owner(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    limit: i64,
) -> diesel::QueryResult<Vec<RecordingId>> {
    let rows: Vec<Id> =
        diesel::sql_query("SELECT id FROM recordings WHERE owner_id = $1 ORDER BY id LIMIT $2")
            .bind::<diesel::sql_types::Uuid, _>(owner)
            .bind::<BigInt, _>(limit)
            .load(conn)
            .await?;
    Ok(rows.into_iter().map(|r| RecordingId(r.id)).collect())
}

/// Locks these recordings `FOR UPDATE` in id order (after their videos) and deletes them;
/// their files, videos, jobs and output rows cascade. Returns how many.
pub async fn delete_recordings(
    conn: &mut AsyncPgConnection,
    recordings: &[RecordingId],
) -> diesel::QueryResult<usize> {
    diesel::sql_query("SELECT 1 FROM recordings WHERE id = ANY($1) ORDER BY id FOR UPDATE")
        .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(recordings)
        .execute(conn)
        .await?;
    diesel::sql_query("DELETE FROM recordings WHERE id = ANY($1)")
        .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(recordings)
        .execute(conn)
        .await
}

/// Locks the recording a video was made from `FOR UPDATE` (nothing for an upload's video).
pub async fn lock_recording_of(
    conn: &mut AsyncPgConnection,
    video: VideoId,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(
        "SELECT 1 FROM recordings
          WHERE id = (SELECT recording_id FROM videos WHERE id = $1) FOR UPDATE",
    )
    .bind::<diesel::sql_types::Uuid, _>(video)
    .execute(conn)
    .await
}

/// Segments of the recording a video was made from: kept (in S3) and excluded.
pub async fn segments_of_video(
    mut conn: &AsyncPgConnection,
    video: VideoId,
) -> diesel::QueryResult<(i64, i64)> {
    #[derive(QueryableByName)]
    struct Segments {
        #[diesel(sql_type = BigInt)]
        kept: i64,
        #[diesel(sql_type = BigInt)]
        excluded: i64,
    }
    let row: Segments = crate::db::prepared::prepared(format!(
        "SELECT count(*) FILTER (WHERE f.state = '{uploaded}') AS kept,
                count(*) FILTER (WHERE f.state = '{excluded}') AS excluded
           FROM videos v JOIN recording_files f ON f.recording_id = v.recording_id
          WHERE v.id = $1 AND f.axis = '{segment}'",
        uploaded = FileState::Uploaded.as_str(),
        excluded = FileState::Excluded.as_str(),
        segment = FileAxis::Segment.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(video)
    .get_result(&mut conn)
    .await?;
    Ok((row.kept, row.excluded))
}

/// The recording a video was made from.
pub async fn recording_of(
    conn: &mut AsyncPgConnection,
    video: VideoId,
) -> diesel::QueryResult<Option<RecordingId>> {
    #[derive(QueryableByName)]
    struct Recording {
        #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
        recording_id: Option<RecordingId>,
    }
    let row: Option<Recording> = diesel::sql_query("SELECT recording_id FROM videos WHERE id = $1")
        .bind::<diesel::sql_types::Uuid, _>(video)
        .get_result(conn)
        .await
        .optional()?;
    Ok(row.and_then(|r| r.recording_id))
}

/// The video a recording became, if any.
pub async fn video_of(
    conn: &mut AsyncPgConnection,
    recording: RecordingId,
) -> diesel::QueryResult<Option<VideoId>> {
    let row: Option<Id> = diesel::sql_query("SELECT id FROM videos WHERE recording_id = $1")
        .bind::<diesel::sql_types::Uuid, _>(recording)
        .get_result(conn)
        .await
        .optional()?;
    Ok(row.map(|r| VideoId(r.id)))
}

/// A file the repackage joins.
#[derive(Debug, Clone, QueryableByName)]
pub struct KeptFile {
    /// `init` or `segment`.
    #[diesel(sql_type = Text)]
    pub axis: crate::domain::recording::FileAxis,
    /// Its number.
    #[diesel(sql_type = diesel::sql_types::Int4)]
    pub sequence: i32,
    /// Where S3 holds it.
    #[diesel(sql_type = Text)]
    pub object_key: String,
    /// The size the ledger confirmed.
    #[diesel(sql_type = BigInt)]
    pub size_bytes: i64,
}

/// What the repackage joins: the init, then every segment in S3, in number order (excluded
/// and refused ones are not part of the recording).
pub async fn kept_files(
    conn: &mut AsyncPgConnection,
    recording: RecordingId,
) -> diesel::QueryResult<Vec<KeptFile>> {
    diesel::sql_query(format!(
        "SELECT axis, sequence, object_key, size_bytes FROM recording_files
          WHERE recording_id = $1 AND state = '{uploaded}' AND axis IN ('{init}', '{segment}')
          ORDER BY axis = '{init}' DESC, sequence",
        uploaded = FileState::Uploaded.as_str(),
        init = FileAxis::Init.as_str(),
        segment = FileAxis::Segment.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(recording)
    .load(conn)
    .await
}

/// How many of the recording's init and segment files the ledger still has `pending` (not
/// yet landed in S3 by the API node's sweeper).
pub async fn pending_files(
    conn: &mut AsyncPgConnection,
    recording: RecordingId,
) -> diesel::QueryResult<i64> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let row: Count = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM recording_files
          WHERE recording_id = $1 AND state = '{pending}' AND axis IN ('{init}', '{segment}')",
        pending = FileState::Pending.as_str(),
        init = FileAxis::Init.as_str(),
        segment = FileAxis::Segment.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(recording)
    .get_result(conn)
    .await?;
    Ok(row.n)
}
