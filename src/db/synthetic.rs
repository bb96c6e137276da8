//! Synthetic rows for benchmarks and plan tests: a backlog of confirmed uploads with queued
//! videos and PENDING jobs, inserted in one statement.

use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

/// Inserts `n` uploads, videos and PENDING jobs for `owner`, available an hour ago in id
/// order, then refreshes the planner's statistics. Returns `n`.
pub async fn backlog(
    conn: &mut AsyncPgConnection,
    owner: Uuid,
    n: i64,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(
        "WITH rows AS (
             SELECT gen_random_uuid() AS upload_id, gen_random_uuid() AS video_id, n
               FROM generate_series(1, $2) n
         ), up AS (
             INSERT INTO uploads (id, owner_id, object_key, filename, content_type, declared_size, state, expires_at)
             SELECT upload_id, $1, 'originals/' || upload_id, 'synthetic.mp4', 'video/mp4', 1, 'confirmed',
                    statement_timestamp()
               FROM rows
         ), vid AS (
             INSERT INTO videos (id, owner_id, upload_id) SELECT video_id, $1, upload_id FROM rows
         )
         INSERT INTO video_encoding_jobs (video_id, original_s3_key, available_at)
         SELECT video_id, 'originals/' || upload_id,
                statement_timestamp() - interval '1 hour' + n * interval '1 microsecond'
           FROM rows",
    )
    .bind::<diesel::sql_types::Uuid, _>(owner)
    .bind::<diesel::sql_types::BigInt, _>(n)
    .execute(conn)
    .await?;
    diesel::sql_query("ANALYZE uploads, videos, video_encoding_jobs")
        .execute(conn)
        .await?;
    Ok(usize::try_from(n).unwrap_or_default())
}

/// Inserts `n` unrouted `video.ready` outbox rows for `owner` in one statement, each with an
/// envelope shaped and sized like a real one (run 1, attempt 1). Returns `n`.
pub async fn events(
    conn: &mut AsyncPgConnection,
    owner: Uuid,
    n: i64,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(
        "WITH rows AS (
             SELECT gen_random_uuid() AS event_id, gen_random_uuid() AS video_id
               FROM generate_series(1, $2))
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
    )
    .bind::<diesel::sql_types::Uuid, _>(owner)
    .bind::<diesel::sql_types::BigInt, _>(n)
    .execute(conn)
    .await
}
