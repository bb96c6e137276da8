//! From a finished recording to its video: which recordings of a node are whole (and which
//! can never be), the lock and links of the transaction that makes the video, and the
//! original axis that its repackage job writes (a `recording_files` row, landed by the
//! sweeper like the others). Lock order (`db/mod.rs`): a recording row after `users` and
//! `videos`, before `video_encoding_jobs`; its file rows after it.

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{OptionalExtension, QueryableByName};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

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
    pub id: Uuid,
    /// Its broadcaster.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub owner_id: Uuid,
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
) -> diesel::QueryResult<Vec<Uuid>> {
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
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Locks an ended recording that has no video yet `FOR UPDATE` (after its owner, lock
/// order); `false` when it has a video already (another sweeper made it) or is not `ended`.
pub async fn lock_for_video(
    conn: &mut AsyncPgConnection,
    recording: Uuid,
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
    video: Uuid,
    state: RecordingState,
) -> diesel::QueryResult<usize> {
    super::prepared::prepared(format!(
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
    owner: Uuid,
    limit: i64,
) -> diesel::QueryResult<Vec<Uuid>> {
    let rows: Vec<Id> =
        diesel::sql_query("SELECT id FROM recordings WHERE owner_id = $1 ORDER BY id LIMIT $2")
            .bind::<diesel::sql_types::Uuid, _>(owner)
            .bind::<BigInt, _>(limit)
            .load(conn)
            .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Locks these recordings `FOR UPDATE` in id order (after their videos) and deletes them;
/// their files, videos, jobs and output rows cascade. Returns how many.
pub async fn delete_recordings(
    conn: &mut AsyncPgConnection,
    recordings: &[Uuid],
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
    video: Uuid,
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
    video: Uuid,
) -> diesel::QueryResult<(i64, i64)> {
    #[derive(QueryableByName)]
    struct Segments {
        #[diesel(sql_type = BigInt)]
        kept: i64,
        #[diesel(sql_type = BigInt)]
        excluded: i64,
    }
    let row: Segments = super::prepared::prepared(format!(
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
    video: Uuid,
) -> diesel::QueryResult<Option<Uuid>> {
    #[derive(QueryableByName)]
    struct Recording {
        #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
        recording_id: Option<Uuid>,
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
    recording: Uuid,
) -> diesel::QueryResult<Option<Uuid>> {
    let row: Option<Id> = diesel::sql_query("SELECT id FROM videos WHERE recording_id = $1")
        .bind::<diesel::sql_types::Uuid, _>(recording)
        .get_result(conn)
        .await
        .optional()?;
    Ok(row.map(|r| r.id))
}

/// A file the repackage joins.
#[derive(Debug, Clone, QueryableByName)]
pub struct KeptFile {
    /// `init` or `segment`.
    #[diesel(sql_type = Text)]
    pub axis: String,
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
    recording: Uuid,
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

/// The original axis of a recording as its ledger row has it.
#[derive(Debug, Clone, QueryableByName)]
pub struct OriginalRow {
    /// `pending` or `uploaded` (or `rejected` at the file boundary).
    #[diesel(sql_type = Text)]
    pub state: String,
    /// Its size.
    #[diesel(sql_type = BigInt)]
    pub size_bytes: i64,
    /// The spool file that holds it while pending.
    #[diesel(sql_type = Text)]
    pub spool_path: String,
    /// The node whose spool that is.
    #[diesel(sql_type = Text)]
    pub node_id: String,
    /// The last failed try's error.
    #[diesel(sql_type = Nullable<Text>)]
    pub last_error: Option<String>,
    /// A sweeper holds a claim on it now (its PUT may be under way).
    #[diesel(sql_type = diesel::sql_types::Bool)]
    pub claimed: bool,
}

/// The recording's original axis, once a repackage attempt registered it.
pub async fn original(
    conn: &mut AsyncPgConnection,
    recording: Uuid,
) -> diesel::QueryResult<Option<OriginalRow>> {
    diesel::sql_query(format!(
        "SELECT state, size_bytes, spool_path, node_id, last_error,
                COALESCE(claimed_until > statement_timestamp(), false) AS claimed
           FROM recording_files
          WHERE recording_id = $1 AND axis = '{original}' AND sequence = 0",
        original = FileAxis::Original.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(recording)
    .get_result(conn)
    .await
    .optional()
}

/// The joined MP4 a repackage attempt spooled (fsynced before this row).
#[derive(Debug, Clone)]
pub struct NewOriginal<'a> {
    /// The recording.
    pub recording: Uuid,
    /// `live/{recording}/original.mp4`.
    pub object_key: &'a str,
    /// Its size.
    pub size: i64,
    /// Relative to the worker's `VIDQ_SPOOL_DIR`.
    pub spool_path: &'a str,
    /// The node whose sweeper lands the file.
    pub node: &'a str,
    /// The attempt's fence: its claim token, which must still hold the recording's job
    /// (`PROCESSING`, lease running). The token and not the attempt number: a claim lost with
    /// a database crash (`super::jobs::CLAIM_SQL`) is taken again under the same number.
    pub claim_token: Uuid,
}

/// What registering the original did.
#[derive(Debug, Clone, QueryableByName)]
pub struct RegisteredOriginal {
    /// The row now names this attempt's file, `pending`.
    #[diesel(sql_type = diesel::sql_types::Bool)]
    pub taken: bool,
    /// The row's state after the statement (`None`: no row).
    #[diesel(sql_type = Nullable<Text>)]
    pub state: Option<String>,
    /// The node and spool file the row named before, when this replaced them.
    #[diesel(sql_type = Nullable<Text>)]
    pub replaced_node: Option<String>,
    /// See `replaced_node`.
    #[diesel(sql_type = Nullable<Text>)]
    pub replaced_path: Option<String>,
}

/// Registers the original axis `pending` naming this attempt's file, then wakes the node's
/// sweeper: a new row, or one an earlier attempt left `pending` or that was refused at the
/// file boundary (tries start over). An `uploaded` row stays as it is, and so does every row
/// when the attempt no longer holds its job (a zombie cannot take the row from the live
/// attempt).
pub async fn register_original(
    conn: &mut AsyncPgConnection,
    new: &NewOriginal<'_>,
) -> diesel::QueryResult<RegisteredOriginal> {
    let row: RegisteredOriginal = diesel::sql_query(format!(
        "WITH fence AS (
             SELECT 1 FROM video_encoding_jobs j JOIN videos v ON v.id = j.video_id
              WHERE v.recording_id = $1 AND j.claim_token = $6
                AND j.status = 'PROCESSING' AND j.lease_until > statement_timestamp()),
         before AS (
             SELECT node_id, spool_path FROM recording_files
              WHERE recording_id = $1 AND axis = '{original}' AND sequence = 0
                AND state IN ('{pending}', '{rejected}')),
         upserted AS (
             INSERT INTO recording_files
                    (recording_id, axis, sequence, object_key, size_bytes, spool_path, node_id)
             SELECT $1, '{original}', 0, $2, $3, $4, $5 FROM fence
             ON CONFLICT (recording_id, axis, sequence) DO UPDATE
                SET state = '{pending}', reject_reason = NULL,
                    size_bytes = EXCLUDED.size_bytes, spool_path = EXCLUDED.spool_path,
                    node_id = EXCLUDED.node_id, tries = 0, next_try_at = NULL,
                    last_error = NULL, claimed_until = NULL,
                    received_at = statement_timestamp()
              WHERE recording_files.state IN ('{pending}', '{rejected}')
             RETURNING state)
         SELECT EXISTS (SELECT 1 FROM upserted) AS taken,
                COALESCE((SELECT state FROM upserted),
                         (SELECT state FROM recording_files
                           WHERE recording_id = $1 AND axis = '{original}' AND sequence = 0))
                    AS state,
                (SELECT node_id FROM before WHERE EXISTS (SELECT 1 FROM upserted))
                    AS replaced_node,
                (SELECT spool_path FROM before WHERE EXISTS (SELECT 1 FROM upserted))
                    AS replaced_path",
        original = FileAxis::Original.as_str(),
        pending = FileState::Pending.as_str(),
        rejected = FileState::Rejected.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(new.recording)
    .bind::<Text, _>(new.object_key)
    .bind::<BigInt, _>(new.size)
    .bind::<Text, _>(new.spool_path)
    .bind::<Text, _>(new.node)
    .bind::<diesel::sql_types::Uuid, _>(new.claim_token)
    .get_result(conn)
    .await?;
    if row.taken {
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<Text, _>(super::ingest::SWEEP_CHANNEL)
            .bind::<Text, _>(new.node)
            .execute(conn)
            .await?;
    }
    Ok(row)
}
