//! The ingest's side of the file ledger: registering each file an encoder PUT, storing what
//! its playlists say, and reading the files back (counts, extent, digest, playback's list).

use diesel::QueryableByName;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Int4, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::schema::recording_files;
use crate::domain::ids::RecordingId;
use crate::domain::recording::{FileAxis, FileState, RecordingState};

/// A file an encoder PUT, written to the spool (and fsynced) before this row.
#[derive(Debug)]
pub struct NewRecordingFile<'a> {
    /// Its recording.
    pub recording: RecordingId,
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
        channel = crate::db::uploads::receiving::SWEEP_CHANNEL,
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
    recording: RecordingId,
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
pub async fn counts(
    conn: &mut AsyncPgConnection,
    recording: RecordingId,
) -> QueryResult<FileCounts> {
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
    recording: RecordingId,
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
    recording: RecordingId,
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

/// A recording file as playback reads it.
#[derive(Debug, Clone, QueryableByName)]
pub struct FileView {
    /// `init` or `segment`.
    #[diesel(sql_type = Text)]
    pub axis: crate::domain::recording::FileAxis,
    /// Its number.
    #[diesel(sql_type = Int4)]
    pub sequence: i32,
    /// From the playlist.
    #[diesel(sql_type = Nullable<Int4>)]
    pub duration_ms: Option<i32>,
    /// Its ledger state.
    #[diesel(sql_type = Text)]
    pub state: crate::domain::recording::FileState,
    /// Its key.
    #[diesel(sql_type = Text)]
    pub object_key: String,
}

/// Every file of a recording, in number order.
pub async fn files_of(
    conn: &mut AsyncPgConnection,
    recording: RecordingId,
) -> QueryResult<Vec<FileView>> {
    diesel::sql_query(
        "SELECT axis, sequence, duration_ms, state, object_key FROM recording_files
          WHERE recording_id = $1 ORDER BY axis, sequence",
    )
    .bind::<diesel::sql_types::Uuid, _>(recording)
    .load(conn)
    .await
}
