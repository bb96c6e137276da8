//! What the benchmarks read back and do to the server between measurements; nothing the
//! service itself runs.

use diesel::QueryResult;
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Double};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use crate::domain::ids::{RecordingId, UploadId, UserId, VideoId};

/// Flushes dirty pages, so a measurement that follows a large insert does not pay for it.
pub async fn checkpoint(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    diesel::sql_query("CHECKPOINT")
        .execute(conn)
        .await
        .map(drop)
}

/// READY videos and `video.ready` events in the database: what a peer queue's run that writes
/// vidq's rows left behind.
pub async fn ready_videos_and_events(conn: &mut AsyncPgConnection) -> QueryResult<(i64, i64)> {
    #[derive(QueryableByName)]
    struct Counts {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        videos: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        events: i64,
    }
    let counts: Counts = diesel::sql_query(
        "SELECT (SELECT count(*) FROM videos WHERE status = 'ready') AS videos,
                (SELECT count(*) FROM notification_outbox WHERE event_type = 'video.ready') AS events",
    )
    .get_result(conn)
    .await?;
    Ok((counts.videos, counts.events))
}

/// Where a READY video's time went, in seconds.
#[derive(Debug, QueryableByName)]
pub struct Timing {
    /// From the video's creation (confirm) to the start of its completed attempt.
    #[diesel(sql_type = Double)]
    pub wait: f64,
    /// From that start to READY.
    #[diesel(sql_type = Double)]
    pub processing: f64,
}

/// The timing of `video`, which must be READY with a completed attempt.
pub async fn timing(conn: &mut AsyncPgConnection, video: VideoId) -> QueryResult<Timing> {
    diesel::sql_query(
        "SELECT extract(epoch FROM a.started_at - v.created_at)::float8 AS wait,
                extract(epoch FROM v.ready_at - a.started_at)::float8 AS processing
           FROM videos v JOIN video_encoding_jobs j ON j.video_id = v.id AND j.parent_id IS NULL
           JOIN job_attempts a ON a.job_id = j.id AND a.outcome = 'completed'
          WHERE v.id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(video)
    .get_result(conn)
    .await
}

/// The end-to-end benchmark's checks over the whole database.
#[derive(Debug, QueryableByName)]
pub struct Checks {
    /// Videos.
    #[diesel(sql_type = BigInt)]
    pub videos: i64,
    /// Videos READY whose job is COMPLETED.
    #[diesel(sql_type = BigInt)]
    pub ready_and_completed: i64,
    /// Jobs not COMPLETED.
    #[diesel(sql_type = BigInt)]
    pub unfinished: i64,
    /// Videos with more than one `video.ready`.
    #[diesel(sql_type = BigInt)]
    pub duplicate_notifications: i64,
    /// Videos without a `video.ready`.
    #[diesel(sql_type = BigInt)]
    pub missing_notifications: i64,
}

/// Counts what [`Checks`] describes.
pub async fn checks(conn: &mut AsyncPgConnection) -> QueryResult<Checks> {
    diesel::sql_query(
        "SELECT (SELECT count(*) FROM videos) AS videos,
                (SELECT count(*) FROM videos v JOIN video_encoding_jobs j
                     ON j.video_id = v.id AND j.parent_id IS NULL
                  WHERE v.status = 'ready' AND j.status = 'COMPLETED') AS ready_and_completed,
                (SELECT count(*) FROM video_encoding_jobs WHERE status <> 'COMPLETED') AS unfinished,
                (SELECT count(*) FROM (SELECT video_id FROM notification_outbox WHERE event_type = 'video.ready'
                  GROUP BY video_id HAVING count(*) > 1) d) AS duplicate_notifications,
                (SELECT count(*) FROM videos v WHERE NOT EXISTS (SELECT 1 FROM notification_outbox o
                  WHERE o.video_id = v.id AND o.event_type = 'video.ready')) AS missing_notifications",
    )
    .get_result(conn)
    .await
}

/// Empties the upload ledger and everything made from it (`vidq bench sweeper`, between
/// measurements).
pub async fn clear_uploads(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    diesel::sql_query("TRUNCATE uploads, notification_outbox CASCADE")
        .execute(conn)
        .await
        .map(drop)
}

/// How many of `ids` are confirmed uploads.
pub async fn confirmed_among(conn: &mut AsyncPgConnection, ids: &[UploadId]) -> QueryResult<usize> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let found: Count = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM uploads WHERE id = ANY($1) AND state = '{}'",
        crate::domain::upload::UploadState::Confirmed.as_str()
    ))
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(ids)
    .get_result(conn)
    .await?;
    Ok(usize::try_from(found.n).unwrap_or(0))
}

/// When one live segment arrived (its row's registration, after the file was fsynced).
#[derive(Debug, QueryableByName)]
pub struct SegmentArrival {
    /// Its recording.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub recording_id: RecordingId,
    /// Its number.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub sequence: i32,
    /// When its row was written.
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    pub received_at: chrono::DateTime<chrono::Utc>,
}

/// The kept segments of `recordings` with their arrival times (`vidq bench live`).
pub async fn segment_arrivals(
    conn: &mut AsyncPgConnection,
    recordings: &[RecordingId],
) -> QueryResult<Vec<SegmentArrival>> {
    diesel::sql_query(
        "SELECT recording_id, sequence, received_at FROM recording_files
          WHERE recording_id = ANY($1) AND axis = 'segment' AND state <> 'excluded'",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(recordings)
    .load(conn)
    .await
}

/// Inserts `n` pending presigned contracts of `owner` and numbers them in
/// `bench_contracts (n, id)`, which [`confirm_pgbench`] takes them from one by one.
pub async fn pending_contracts(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    n: i64,
) -> QueryResult<()> {
    // `bench_next` hands the numbers out to pgbench's clients (the serial's own sequence is
    // spent by the insert).
    conn.batch_execute(
        "CREATE TABLE bench_contracts (n bigserial PRIMARY KEY, id uuid NOT NULL);
         CREATE SEQUENCE bench_next",
    )
    .await?;
    diesel::sql_query(
        "WITH rows AS (SELECT gen_random_uuid() AS id FROM generate_series(1, $2)),
         up AS (
             INSERT INTO uploads (id, owner_id, object_key, filename, content_type, declared_size, expires_at)
             SELECT id, $1, 'originals/' || id, 'bench.mp4', 'video/mp4', 1024,
                    statement_timestamp() + interval '1 hour'
               FROM rows)
         INSERT INTO bench_contracts (id) SELECT id FROM rows",
    )
    .bind::<diesel::sql_types::Uuid, _>(owner)
    .bind::<BigInt, _>(n)
    .execute(conn)
    .await?;
    diesel::sql_query("VACUUM ANALYZE uploads, bench_contracts")
        .execute(conn)
        .await
        .map(drop)
}

/// The confirm transaction's statements as a pgbench script (`-M prepared`, variable
/// `owner`): the uploader's lock, the contract's compare-and-set, the video, the job, the
/// workers' NOTIFY and the `video.accepted` event with its wake-up test, each its own round
/// trip, as pgbench sends them. It measures what PostgreSQL can do with them and nothing
/// else (no HTTP, no S3 HEAD, no key lookup).
pub fn confirm_pgbench() -> String {
    format!(
        r#"BEGIN;
SELECT id FROM users WHERE id = :owner FOR KEY SHARE;
UPDATE uploads SET state = 'confirmed', updated_at = statement_timestamp()
 WHERE id = (SELECT id FROM bench_contracts WHERE n = (SELECT nextval('bench_next')))
   AND state IN ('pending', 'uploaded')
RETURNING id AS upload_id
\gset
INSERT INTO videos (id, owner_id, upload_id) VALUES (gen_random_uuid(), :owner, :upload_id)
RETURNING id AS video_id, created_at
\gset
INSERT INTO video_encoding_jobs (video_id, original_s3_key, kind)
VALUES (:video_id, 'originals/' || :upload_id::text, 'encode') RETURNING id AS job_id
\gset
NOTIFY {jobs};
WITH ins AS (
    INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
    VALUES (gen_random_uuid(), 'video.accepted', :owner, :video_id,
            jsonb_build_object('id', gen_random_uuid(), 'type', 'video.accepted',
                               'occurred_at', :created_at::timestamptz, 'video_id', :video_id::uuid,
                               'data', jsonb_build_object('status', 'queued', 'upload_id', :upload_id::uuid, 'run', 1)))
    RETURNING 1)
SELECT pg_notify('{events}', '') FROM ins WHERE NOT {nobody_waits};
COMMIT;
"#,
        jobs = super::jobs::JOBS_CHANNEL,
        events = super::deliveries::outbox::EVENTS_CHANNEL,
        nobody_waits = super::wake::nobody_waits_sql(),
    )
}

/// The ids of up to `n` videos, oldest first: what a benchmark reads back after making them.
pub async fn some_videos(conn: &mut AsyncPgConnection, n: i64) -> QueryResult<Vec<VideoId>> {
    use super::schema::videos;
    use diesel::QueryDsl;
    videos::table
        .select(videos::id)
        .order(videos::id)
        .limit(n)
        .load(conn)
        .await
}

/// Takes the queue and ledger tables' own autovacuum settings away (migration 000022's
/// `down.sql`): the sustained benchmark's run on PostgreSQL's defaults.
pub async fn reset_table_autovacuum(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    conn.batch_execute(include_str!(
        "../../migrations/2026-12-05-000022_queue_autovacuum/down.sql"
    ))
    .await
}

/// What autovacuum has done to the jobs table so far.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct JobsTableStats {
    /// Dead rows not vacuumed yet (the statistics collector's estimate).
    #[diesel(sql_type = BigInt)]
    pub dead_rows: i64,
    /// Autovacuum runs.
    #[diesel(sql_type = BigInt)]
    pub autovacuums: i64,
}

/// [`JobsTableStats`] of `video_encoding_jobs` now.
pub async fn jobs_table_stats(conn: &mut AsyncPgConnection) -> QueryResult<JobsTableStats> {
    diesel::sql_query(
        "SELECT n_dead_tup AS dead_rows, autovacuum_count AS autovacuums
           FROM pg_stat_user_tables WHERE relname = 'video_encoding_jobs'",
    )
    .get_result(conn)
    .await
}

/// What the soak (`vidq bench chaos`) checks once the faults stop, counted in one read.
#[derive(Debug, QueryableByName)]
pub struct SoakCounts {
    /// Of the uploads the API confirmed to a client, those whose video is READY.
    #[diesel(sql_type = BigInt)]
    pub confirmed_ready: i64,
    /// Videos.
    #[diesel(sql_type = BigInt)]
    pub videos: i64,
    /// Videos with exactly one `video.ready`.
    #[diesel(sql_type = BigInt)]
    pub ready_once: i64,
    /// Videos with more than one.
    #[diesel(sql_type = BigInt)]
    pub ready_twice: i64,
    /// Jobs not COMPLETED.
    #[diesel(sql_type = BigInt)]
    pub jobs_open: i64,
    /// Jobs PROCESSING.
    #[diesel(sql_type = BigInt)]
    pub jobs_processing: i64,
    /// Ledger rows `pending` (uploads, recording files, artifacts).
    #[diesel(sql_type = BigInt)]
    pub ledger_pending: i64,
    /// Deliveries not delivered.
    #[diesel(sql_type = BigInt)]
    pub deliveries_open: i64,
    /// Objects and prefixes still owed to the bucket (`doomed_objects`).
    #[diesel(sql_type = BigInt)]
    pub doomed_owed: i64,
}

/// Counts [`SoakCounts`]; `confirmed` are the upload ids the API confirmed to clients.
pub async fn soak_counts(
    conn: &mut AsyncPgConnection,
    confirmed: &[UploadId],
) -> QueryResult<SoakCounts> {
    diesel::sql_query(
        "SELECT (SELECT count(*) FROM uploads u JOIN videos v ON v.upload_id = u.id
                  WHERE u.id = ANY($1) AND v.status = 'ready') AS confirmed_ready,
                (SELECT count(*) FROM videos) AS videos,
                (SELECT count(*) FROM videos v WHERE (SELECT count(*) FROM notification_outbox o
                  WHERE o.video_id = v.id AND o.event_type = 'video.ready') = 1) AS ready_once,
                (SELECT count(*) FROM videos v WHERE (SELECT count(*) FROM notification_outbox o
                  WHERE o.video_id = v.id AND o.event_type = 'video.ready') > 1) AS ready_twice,
                (SELECT count(*) FROM video_encoding_jobs WHERE status <> 'COMPLETED') AS jobs_open,
                (SELECT count(*) FROM video_encoding_jobs WHERE status = 'PROCESSING') AS jobs_processing,
                (SELECT count(*) FROM uploads WHERE state = 'pending')
                  + (SELECT count(*) FROM recording_files WHERE state = 'pending')
                  + (SELECT count(*) FROM video_artifacts WHERE state = 'pending') AS ledger_pending,
                (SELECT count(*) FROM event_deliveries WHERE status <> 'delivered') AS deliveries_open,
                (SELECT count(*) FROM doomed_objects) AS doomed_owed",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(confirmed)
    .get_result(conn)
    .await
}

/// Every event id in the outbox, as text.
pub async fn outbox_event_ids(conn: &mut AsyncPgConnection) -> QueryResult<Vec<String>> {
    #[derive(QueryableByName)]
    struct EventId {
        #[diesel(sql_type = diesel::sql_types::Text)]
        id: String,
    }
    let ids: Vec<EventId> =
        diesel::sql_query("SELECT event_id::text AS id FROM notification_outbox")
            .load(conn)
            .await?;
    Ok(ids.into_iter().map(|e| e.id).collect())
}
