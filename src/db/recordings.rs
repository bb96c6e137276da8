//! Live recordings and the ledger of their files (`recordings`, `recording_files`). Every
//! statement here is a single statement on these two tables (a recording row, then its file
//! rows), after `users` through their foreign keys: see the lock order in `db/mod.rs`.

use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Int4, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::{recording_files, recordings};
use crate::domain::recording::{EndReason, FileAxis, FileState, RecordingState};

/// A `recordings` row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = recordings)]
pub struct RecordingRow {
    /// Primary key (UUIDv7).
    pub id: Uuid,
    /// The broadcaster.
    pub owner_id: Uuid,
    /// See [`RecordingState`].
    pub state: String,
    /// The node whose spool holds its files.
    pub node_id: String,
    /// See [`EndReason`].
    pub end_reason: Option<String>,
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
}

/// How many recordings of `owner` are still open (`waiting`, `live`, `ending`), counted up
/// to `limit` at most (the partial index `recordings_open_owner_idx` holds only those rows).
pub async fn open_of_owner(
    conn: &mut AsyncPgConnection,
    owner: Uuid,
    limit: u32,
) -> QueryResult<i64> {
    let open = [
        RecordingState::Waiting,
        RecordingState::Live,
        RecordingState::Ending,
    ]
    .map(RecordingState::as_str);
    super::count_open_of_owner(conn, "recordings", &open, owner, limit).await
}

/// Records a new recording, `waiting`, spooled on `node`.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    id: Uuid,
    owner: Uuid,
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
    owner: Uuid,
    id: Uuid,
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
pub async fn touch(conn: &mut AsyncPgConnection, id: Uuid) -> QueryResult<usize> {
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
    id: Uuid,
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

/// A file an encoder PUT, written to the spool (and fsynced) before this row.
#[derive(Debug)]
pub struct NewRecordingFile<'a> {
    /// Its recording.
    pub recording: Uuid,
    /// Init or segment.
    pub axis: FileAxis,
    /// Segment number (0 for init).
    pub sequence: i32,
    /// Where it goes in S3.
    pub object_key: &'a str,
    /// Its size.
    pub size: i64,
    /// Its spool file, relative to the root.
    pub spool_path: &'a str,
    /// The node holding it.
    pub node: &'a str,
    /// SHA-256 (hex) of its bytes.
    pub sha256: &'a str,
}

/// Registers a received file in one statement: `pending` (owed to S3, and the node's
/// sweeper is woken), or `excluded` when it arrived after the recording's cutoff or is
/// numbered past its final playlist. A file sent again (the encoder retried its PUT)
/// replaces a `pending` row's size and try count; an `uploaded` or `excluded` row stays as
/// it is (a landed file is final). Returns the row's state after the statement, whether this
/// file is the one it names now, and the spool path it named before (a replaced version, to
/// remove). A file the row did not take is judged by [`file_digest`], read afresh.
pub async fn record_file(
    conn: &mut AsyncPgConnection,
    file: &NewRecordingFile<'_>,
) -> QueryResult<RecordedFile> {
    #[derive(QueryableByName)]
    struct Stored {
        #[diesel(sql_type = Text)]
        state: String,
        #[diesel(sql_type = Nullable<Text>)]
        before: Option<String>,
        #[diesel(sql_type = Bool)]
        taken: bool,
    }
    let sql = format!(
        "WITH decided AS (
             -- FOR SHARE: a playlist's durations (`set_durations`) either committed before
             -- this reads them, or wait for this row and then find it.
             -- A recording past `ending` is final: a file whose statement waited here on
             -- the row lock of the pass that closed it is excluded too (the locked row is
             -- read again after the wait), so no file joins a recording already judged.
             SELECT CASE WHEN r.cutoff_at < statement_timestamp()
                           OR r.state NOT IN ('{waiting}', '{live}', '{ending}')
                           OR ($2 = '{segment}' AND r.final_sequence IS NOT NULL
                               AND $3 > r.final_sequence)
                         THEN '{excluded}' ELSE '{pending}' END AS state,
                    CASE WHEN $2 = '{segment}'
                         THEN (r.playlist_durations ->> $3::text)::int4 END AS duration_ms
               FROM recordings r WHERE r.id = $1 FOR SHARE),
         stored AS (
             INSERT INTO recording_files
                    (recording_id, axis, sequence, object_key, size_bytes, spool_path, node_id,
                     state, duration_ms, content_sha256)
             SELECT $1, $2, $3, $4, $5, $6, $7, decided.state, decided.duration_ms, $8
               FROM decided
             ON CONFLICT (recording_id, axis, sequence) DO UPDATE
                SET size_bytes = excluded.size_bytes, spool_path = excluded.spool_path,
                    content_sha256 = excluded.content_sha256,
                    received_at = statement_timestamp(),
                    tries = 0, next_try_at = NULL, last_error = NULL
              WHERE recording_files.state = '{pending}'
             RETURNING state, node_id),
         before AS (
             SELECT spool_path FROM recording_files
              WHERE recording_id = $1 AND axis = $2 AND sequence = $3)
         SELECT COALESCE(
                    (SELECT state FROM stored),
                    (SELECT state FROM recording_files
                      WHERE recording_id = $1 AND axis = $2 AND sequence = $3)) AS state,
                (SELECT count(pg_notify('{channel}', node_id)) FROM stored
                  WHERE state = '{pending}') AS woken,
                (SELECT spool_path FROM before) AS before,
                EXISTS (SELECT 1 FROM stored) AS taken",
        segment = FileAxis::Segment.as_str(),
        excluded = FileState::Excluded.as_str(),
        pending = FileState::Pending.as_str(),
        channel = super::ingest::SWEEP_CHANNEL,
        waiting = RecordingState::Waiting.as_str(),
        live = RecordingState::Live.as_str(),
        ending = RecordingState::Ending.as_str(),
    );
    let stored: Stored = diesel::sql_query(sql)
        .bind::<diesel::sql_types::Uuid, _>(file.recording)
        .bind::<Text, _>(file.axis.as_str())
        .bind::<Int4, _>(file.sequence)
        .bind::<Text, _>(file.object_key)
        .bind::<BigInt, _>(file.size)
        .bind::<Text, _>(file.spool_path)
        .bind::<Text, _>(file.node)
        .bind::<Text, _>(file.sha256)
        .get_result(conn)
        .await?;
    let state = file_state(&stored.state)?;
    Ok(RecordedFile {
        state,
        taken: stored.taken,
        replaced: stored.before.filter(|before| before != file.spool_path),
    })
}

/// What registering a received file did.
#[derive(Debug, Clone)]
pub struct RecordedFile {
    /// The row's state now.
    pub state: FileState,
    /// The row names this file (inserted, or a `pending` row updated to it).
    pub taken: bool,
    /// The spool path the row named before, if another.
    pub replaced: Option<String>,
}

/// Stores what an encoder's playlist says. On the recording: the durations it gave its
/// segments (for segments whose PUT is still being registered: `record_file` reads them
/// under a share lock), and, from the first playlist that says them, the first segment
/// number and the target duration, kept for the life of the recording. Then, in a second
/// statement that sees every row committed meanwhile, the durations on the rows that exist.
pub async fn set_playlist(
    conn: &mut AsyncPgConnection,
    recording: Uuid,
    playlist: &crate::domain::recording::IngestPlaylist,
) -> QueryResult<usize> {
    use diesel_async::AsyncConnection;
    let segments = &playlist.segments;
    let first = playlist.media_sequence.map(|n| n as i32);
    let target = playlist.target_duration.map(|n| n as i32);
    if segments.is_empty() && first.is_none() && target.is_none() {
        return Ok(0);
    }
    let numbers: Vec<i32> = segments.iter().map(|(n, _)| *n as i32).collect();
    let millis: Vec<i32> = segments.iter().map(|(_, ms)| *ms as i32).collect();
    conn.transaction(async |conn| {
        diesel::sql_query(
            "UPDATE recordings
                SET playlist_durations = playlist_durations || COALESCE((
                        SELECT jsonb_object_agg(seq::text, ms)
                          FROM unnest($2::int4[], $3::int4[]) AS v(seq, ms)), '{}'),
                    first_sequence = COALESCE(first_sequence, $4),
                    target_duration_secs = COALESCE(target_duration_secs, $5)
              WHERE id = $1",
        )
        .bind::<diesel::sql_types::Uuid, _>(recording)
        .bind::<diesel::sql_types::Array<Int4>, _>(&numbers)
        .bind::<diesel::sql_types::Array<Int4>, _>(&millis)
        .bind::<Nullable<Int4>, _>(first)
        .bind::<Nullable<Int4>, _>(target)
        .execute(conn)
        .await?;
        if segments.is_empty() {
            return Ok(0);
        }
        diesel::sql_query(format!(
            "UPDATE recording_files f SET duration_ms = v.ms
               FROM unnest($2::int4[], $3::int4[]) AS v(seq, ms)
              WHERE f.recording_id = $1 AND f.axis = '{}' AND f.sequence = v.seq
                AND f.duration_ms IS DISTINCT FROM v.ms",
            FileAxis::Segment.as_str()
        ))
        .bind::<diesel::sql_types::Uuid, _>(recording)
        .bind::<diesel::sql_types::Array<Int4>, _>(&numbers)
        .bind::<diesel::sql_types::Array<Int4>, _>(&millis)
        .execute(conn)
        .await
    })
    .await
}

/// How many of a recording's segments are in each state, and whether its init is uploaded.
#[derive(Debug, Clone, Default, QueryableByName)]
pub struct FileCounts {
    /// Segments received (any state).
    #[diesel(sql_type = BigInt)]
    pub received: i64,
    /// Segments S3 holds.
    #[diesel(sql_type = BigInt)]
    pub uploaded: i64,
    /// Segments excluded by the cutoff.
    #[diesel(sql_type = BigInt)]
    pub excluded: i64,
    /// The init segment is in S3.
    #[diesel(sql_type = Bool)]
    pub init_uploaded: bool,
}

/// Counts of a recording's files.
pub async fn counts(conn: &mut AsyncPgConnection, recording: Uuid) -> QueryResult<FileCounts> {
    diesel::sql_query(format!(
        "SELECT count(*) FILTER (WHERE axis = '{segment}') AS received,
                count(*) FILTER (WHERE axis = '{segment}' AND state = '{uploaded}') AS uploaded,
                count(*) FILTER (WHERE axis = '{segment}' AND state = '{excluded}') AS excluded,
                COALESCE(bool_or(axis = '{init}' AND state = '{uploaded}'), false) AS init_uploaded
           FROM recording_files WHERE recording_id = $1",
        segment = FileAxis::Segment.as_str(),
        init = FileAxis::Init.as_str(),
        uploaded = FileState::Uploaded.as_str(),
        excluded = FileState::Excluded.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(recording)
    .get_result(conn)
    .await
}

/// How far a recording's segments reach: the highest segment number received (`None`
/// before the first), and the sum of the durations its playlists gave them, in ms. An RTMP
/// stream that comes back after the process that took it is gone goes on from here.
pub async fn segment_extent(
    conn: &mut AsyncPgConnection,
    recording: Uuid,
) -> QueryResult<(Option<i32>, i64)> {
    #[derive(QueryableByName)]
    struct Extent {
        #[diesel(sql_type = Nullable<Int4>)]
        last: Option<i32>,
        #[diesel(sql_type = BigInt)]
        listed_ms: i64,
    }
    let extent: Extent = diesel::sql_query(format!(
        "SELECT max(sequence) AS last, COALESCE(sum(duration_ms), 0)::bigint AS listed_ms
           FROM recording_files WHERE recording_id = $1 AND axis = '{segment}'",
        segment = FileAxis::Segment.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(recording)
    .get_result(conn)
    .await?;
    Ok((extent.last, extent.listed_ms))
}

/// A recording file's state and digest now.
pub async fn file_digest(
    conn: &mut AsyncPgConnection,
    recording: Uuid,
    axis: FileAxis,
    sequence: i32,
) -> QueryResult<Option<(FileState, Option<String>)>> {
    let row: Option<(String, Option<String>)> = recording_files::table
        .filter(recording_files::recording_id.eq(recording))
        .filter(recording_files::axis.eq(axis.as_str()))
        .filter(recording_files::sequence.eq(sequence))
        .select((recording_files::state, recording_files::content_sha256))
        .first(conn)
        .await
        .optional()?;
    row.map(|(state, digest)| Ok((file_state(&state)?, digest)))
        .transpose()
}

/// A file row's state; one the code does not know is an error, never a default.
fn file_state(raw: &str) -> QueryResult<FileState> {
    raw.parse()
        .map_err(|e: crate::domain::upload::UnknownState| {
            diesel::result::Error::DeserializationError(Box::new(e))
        })
}

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
/// for `lease_secs`, in one statement (as `ledger::claim_page` does for uploads).
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

/// A recording file as playback reads it.
#[derive(Debug, Clone, QueryableByName)]
pub struct FileView {
    /// `init` or `segment`.
    #[diesel(sql_type = Text)]
    pub axis: String,
    /// Its number.
    #[diesel(sql_type = Int4)]
    pub sequence: i32,
    /// From the playlist.
    #[diesel(sql_type = Nullable<Int4>)]
    pub duration_ms: Option<i32>,
    /// Its ledger state.
    #[diesel(sql_type = Text)]
    pub state: String,
    /// Its key.
    #[diesel(sql_type = Text)]
    pub object_key: String,
}

/// Every file of a recording, in number order.
pub async fn files_of(conn: &mut AsyncPgConnection, recording: Uuid) -> QueryResult<Vec<FileView>> {
    diesel::sql_query(
        "SELECT axis, sequence, duration_ms, state, object_key FROM recording_files
          WHERE recording_id = $1 ORDER BY axis, sequence",
    )
    .bind::<diesel::sql_types::Uuid, _>(recording)
    .load(conn)
    .await
}

/// Deletes a recording and (cascading) its file rows: its video is being deleted.
pub async fn delete(conn: &mut AsyncPgConnection, id: Uuid) -> QueryResult<usize> {
    diesel::delete(recordings::table.filter(recordings::id.eq(id)))
        .execute(conn)
        .await
}

/// The recording, whoever holds it (a playback token authorizes the reader).
pub async fn find(conn: &mut AsyncPgConnection, id: Uuid) -> QueryResult<Option<RecordingRow>> {
    recordings::table
        .filter(recordings::id.eq(id))
        .select(RecordingRow::as_select())
        .first(conn)
        .await
        .optional()
}

/// CAS `live -> ending` (`idle`) for `node`'s recordings with nothing received for
/// `idle_secs`, their cutoff `grace_secs` after the end; returns their ids.
pub async fn end_idle(
    conn: &mut AsyncPgConnection,
    node: &str,
    idle_secs: f64,
    grace_secs: f64,
) -> QueryResult<Vec<Uuid>> {
    end_quiet(conn, node, Quiet::Idle, idle_secs, grace_secs).await
}

/// CAS `waiting -> ending` (`expired`) for `node`'s recordings created more than `ttl_secs`
/// ago that never received a file or playlist, their cutoff `grace_secs` after the end (a
/// file racing the expiry still counts, as after any end); returns their ids.
pub async fn expire_waiting(
    conn: &mut AsyncPgConnection,
    node: &str,
    ttl_secs: f64,
    grace_secs: f64,
) -> QueryResult<Vec<Uuid>> {
    end_quiet(conn, node, Quiet::NeverStreamed, ttl_secs, grace_secs).await
}

/// Which silence ends a recording by itself.
#[derive(Clone, Copy)]
enum Quiet {
    /// `live`, nothing received since `last_ingest_at`.
    Idle,
    /// `waiting`: nothing ever received since `created_at`.
    NeverStreamed,
}

/// The CAS of [`end_idle`] and [`expire_waiting`]: `node`'s recordings quiet for `secs` end.
async fn end_quiet(
    conn: &mut AsyncPgConnection,
    node: &str,
    quiet: Quiet,
    secs: f64,
    grace_secs: f64,
) -> QueryResult<Vec<Uuid>> {
    #[derive(QueryableByName)]
    struct Ended {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        id: Uuid,
    }
    let (from, reason, since) = match quiet {
        Quiet::Idle => (RecordingState::Live, EndReason::Idle, "last_ingest_at"),
        Quiet::NeverStreamed => (RecordingState::Waiting, EndReason::Expired, "created_at"),
    };
    let ended: Vec<Ended> = diesel::sql_query(format!(
        "UPDATE recordings
            SET state = '{ending}', end_reason = '{reason}', ended_at = statement_timestamp(),
                cutoff_at = statement_timestamp() + make_interval(secs => $3),
                updated_at = statement_timestamp()
          WHERE node_id = $1 AND state = '{from}'
            AND {since} < statement_timestamp() - make_interval(secs => $2)
         RETURNING id",
        ending = RecordingState::Ending.as_str(),
        reason = reason.as_str(),
        from = from.as_str(),
    ))
    .bind::<Text, _>(node)
    .bind::<diesel::sql_types::Double, _>(secs)
    .bind::<diesel::sql_types::Double, _>(grace_secs)
    .load(conn)
    .await?;
    Ok(ended.into_iter().map(|e| e.id).collect())
}

/// CAS `ending -> ended` for `node`'s recordings past their cutoff: what they hold is
/// final. In the same statement, their segments that no playlist gave a duration (the
/// encoder stopped before naming them) are `excluded`: no player could be told their
/// length, and they would hold the playlist's end back for good.
pub async fn close_past_cutoff(conn: &mut AsyncPgConnection, node: &str) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "WITH closed AS (
             UPDATE recordings SET state = '{ended}', updated_at = statement_timestamp()
              WHERE node_id = $1 AND state = '{ending}' AND cutoff_at < statement_timestamp()
             RETURNING id),
         unnamed AS (
             UPDATE recording_files f
                SET state = '{excluded}', claimed_until = NULL, uploaded_at = NULL
               FROM closed
              WHERE f.recording_id = closed.id AND f.axis = '{segment}'
                AND f.duration_ms IS NULL AND f.state IN ('{pending}', '{uploaded}')
             RETURNING 1)
         -- A data-modifying WITH runs whether or not the query reads it.
         SELECT count(*) AS n FROM closed",
        ended = RecordingState::Ended.as_str(),
        ending = RecordingState::Ending.as_str(),
        excluded = FileState::Excluded.as_str(),
        segment = FileAxis::Segment.as_str(),
        pending = FileState::Pending.as_str(),
        uploaded = FileState::Uploaded.as_str(),
    ))
    .bind::<Text, _>(node)
    .get_result::<Count>(conn)
    .await
    .map(|c| c.n as usize)
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}
