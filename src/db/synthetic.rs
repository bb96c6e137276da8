//! Synthetic rows for benchmarks and plan tests: a backlog of confirmed uploads with queued
//! videos and PENDING jobs, inserted in one statement.

use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::domain::ids::UserId;

/// The SQL of a UUIDv7 for row `n`, shaped as vidq's own ids are (`Uuid::now_v7`): row `n`'s
/// millisecond is `clock.ms + n`, so the ids sort in row order as ids made one after another
/// do, then the version, random bits and the RFC variant. Random (v4) ids, which the API never
/// makes, would scatter every index insert over the whole index and make each page touched
/// after a checkpoint a full-page image in the WAL. Needs a `clock` row with `ms`.
fn v7_of_row(n: &str) -> String {
    format!(
        "(lpad(to_hex(clock.ms + {n}), 12, '0') || '7' \
         || substr(md5(random()::text), 1, 3) || '8' || substr(md5(random()::text), 1, 15))::uuid"
    )
}

/// The `clock` [`v7_of_row`] reads: as many milliseconds before now as there are rows (`$2`),
/// so the last row's id is not in the future.
const CLOCK: &str = "SELECT (extract(epoch FROM statement_timestamp()) * 1000)::bigint - $2 AS ms";

/// Inserts `n` uploads, videos and PENDING jobs for `owner`, available an hour ago in id
/// order, with time-ordered ids as the API makes them, then refreshes the planner's
/// statistics. Returns `n`.
pub async fn backlog(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    n: i64,
) -> diesel::QueryResult<usize> {
    backlog_of_owners(conn, &[owner], n).await
}

/// [`backlog`], with the videos dealt to `owners` in turn (row 1 to the first, row 2 to the
/// second, ...), as several tenants' uploads would arrive.
pub async fn backlog_of_owners(
    conn: &mut AsyncPgConnection,
    owners: &[UserId],
    n: i64,
) -> diesel::QueryResult<usize> {
    more_jobs(conn, owners, n).await?;
    diesel::sql_query("ANALYZE uploads, videos, video_encoding_jobs")
        .execute(conn)
        .await?;
    Ok(usize::try_from(n).unwrap_or_default())
}

/// [`backlog_of_owners`] without refreshing the statistics: jobs added while workers drain
/// (the sustained benchmark, where autovacuum's own ANALYZE is part of what is measured).
pub async fn more_jobs(
    conn: &mut AsyncPgConnection,
    owners: &[UserId],
    n: i64,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(format!(
        "WITH clock AS ({CLOCK}), rows AS (
             SELECT {upload_id} AS upload_id, {video_id} AS video_id, n,
                    ($1::uuid[])[1 + (n - 1) % cardinality($1::uuid[])] AS owner_id
               FROM clock, generate_series(1, $2) n
         ), up AS (
             INSERT INTO uploads (id, owner_id, object_key, filename, content_type, declared_size, state, expires_at)
             SELECT upload_id, owner_id, 'originals/' || upload_id, 'synthetic.mp4', 'video/mp4', 1,
                    'confirmed', statement_timestamp()
               FROM rows
         ), vid AS (
             INSERT INTO videos (id, owner_id, upload_id) SELECT video_id, owner_id, upload_id FROM rows
         )
         INSERT INTO video_encoding_jobs (video_id, original_s3_key, available_at)
         SELECT video_id, 'originals/' || upload_id,
                statement_timestamp() - interval '1 hour' + n * interval '1 microsecond'
           FROM rows",
        upload_id = v7_of_row("n"),
        video_id = v7_of_row("n"),
    ))
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(owners)
    .bind::<diesel::sql_types::BigInt, _>(n)
    .execute(conn)
    .await?;
    Ok(usize::try_from(n).unwrap_or_default())
}

/// Inserts `n` unrouted `video.ready` outbox rows for `owner` in one statement, each with an
/// envelope shaped and sized like a real one (run 1, attempt 1) and time-ordered ids.
/// Returns `n`.
pub async fn events(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    n: i64,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(format!(
        "WITH clock AS ({CLOCK}), rows AS (
             SELECT {event_id} AS event_id, {video_id} AS video_id
               FROM clock, generate_series(1, $2) n)
         INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
         SELECT event_id, 'video.ready', $1, video_id,
                jsonb_build_object(
                    'id', event_id, 'type', 'video.ready', 'occurred_at', statement_timestamp(),
                    'video_id', video_id,
                    'data', jsonb_build_object(
                        'status', 'ready', 'run', 1, 'duration_ms', 10080, 'width', 1280,
                        'height', 720,
                        'playback', jsonb_build_object(
                            'hls_key', 'videos/' || video_id || '/r1/a1/hls/index.m3u8',
                            'mp4_key', 'videos/' || video_id || '/r1/a1/video.mp4',
                            'thumbnail_key', 'videos/' || video_id || '/r1/a1/thumb.jpg')))
           FROM rows",
        event_id = v7_of_row("n"),
        video_id = v7_of_row("n"),
    ))
    .bind::<diesel::sql_types::Uuid, _>(owner)
    .bind::<diesel::sql_types::BigInt, _>(n)
    .execute(conn)
    .await
}
