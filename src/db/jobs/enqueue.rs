//! Enqueueing: the statements that put jobs on the queue (inside a confirm's or a
//! recording's transaction) and wake the workers when that transaction commits.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::JOBS_CHANNEL;
use crate::db::schema::video_encoding_jobs;
use crate::domain::ids::VideoId;
use crate::domain::job::JobKind;

/// Enqueues a PENDING job of `kind` for a video; joins the caller's transaction.
pub async fn insert(
    mut conn: &AsyncPgConnection,
    video: VideoId,
    original_key: &str,
    kind: JobKind,
) -> QueryResult<i64> {
    diesel::insert_into(video_encoding_jobs::table)
        .values((
            video_encoding_jobs::video_id.eq(video),
            video_encoding_jobs::original_s3_key.eq(original_key),
            video_encoding_jobs::kind.eq(kind.as_str()),
        ))
        .returning(video_encoding_jobs::id)
        .get_result(&mut conn)
        .await
}

/// Inserts a PENDING job of `kind` for each of `videos`, reading `original_keys[i]`, in one
/// statement; returns each job's `(video, id)`. Joins the caller's transaction.
pub async fn insert_all(
    mut conn: &AsyncPgConnection,
    videos: Vec<VideoId>,
    original_keys: Vec<String>,
    kind: JobKind,
) -> QueryResult<Vec<(VideoId, i64)>> {
    use diesel::sql_types::{Array, BigInt, Text, Uuid as SqlUuid};
    #[derive(QueryableByName)]
    struct Inserted {
        #[diesel(sql_type = SqlUuid)]
        video_id: VideoId,
        #[diesel(sql_type = BigInt)]
        id: i64,
    }
    let inserted: Vec<Inserted> = crate::db::prepared::prepared(
        "INSERT INTO video_encoding_jobs (video_id, original_s3_key, kind)
         SELECT video_id, original_s3_key, $3
           FROM unnest($1::uuid[], $2::text[]) AS t (video_id, original_s3_key)
         RETURNING video_id, id",
    )
    .bind::<Array<SqlUuid>, _>(videos)
    .bind::<Array<Text>, _>(original_keys)
    .bind::<Text, _>(kind.as_str())
    .load(&mut conn)
    .await?;
    Ok(inserted.into_iter().map(|r| (r.video_id, r.id)).collect())
}

/// Wakes listening workers when the caller's transaction commits (NOTIFY is delivered at
/// commit and dropped on rollback, so a worker is never woken for a job that does not exist).
pub async fn notify_claimable(mut conn: &AsyncPgConnection) -> QueryResult<()> {
    crate::db::prepared::prepared(format!("NOTIFY {JOBS_CHANNEL}"))
        .execute(&mut conn)
        .await
        .map(drop)
}

/// Locks the jobs of these videos `FOR UPDATE`, in id order, after their videos (lock order).
pub async fn lock_for_videos(
    conn: &mut AsyncPgConnection,
    videos: &[VideoId],
) -> QueryResult<Vec<i64>> {
    video_encoding_jobs::table
        .filter(video_encoding_jobs::video_id.eq_any(videos))
        .select(video_encoding_jobs::id)
        .order(video_encoding_jobs::id)
        .for_update()
        .load(conn)
        .await
}
