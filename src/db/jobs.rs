//! Encoding jobs: the queue itself.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::video_encoding_jobs;

/// The channel workers LISTEN on; a transaction that makes a job claimable NOTIFYs it.
pub const JOBS_CHANNEL: &str = "vidq_jobs";

/// Enqueues a PENDING job for a video; joins the caller's transaction.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    video: Uuid,
    original_key: &str,
) -> QueryResult<i64> {
    diesel::insert_into(video_encoding_jobs::table)
        .values((
            video_encoding_jobs::video_id.eq(video),
            video_encoding_jobs::original_s3_key.eq(original_key),
        ))
        .returning(video_encoding_jobs::id)
        .get_result(conn)
        .await
}

/// Wakes listening workers when the caller's transaction commits (NOTIFY is delivered at
/// commit and dropped on rollback, so a worker is never woken for a job that does not exist).
pub async fn notify_claimable(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    diesel::sql_query(format!("NOTIFY {JOBS_CHANNEL}"))
        .execute(conn)
        .await
        .map(drop)
}

/// Locks the jobs of these videos `FOR UPDATE`, in id order, after their videos (lock order).
pub async fn lock_for_videos(
    conn: &mut AsyncPgConnection,
    videos: &[Uuid],
) -> QueryResult<Vec<i64>> {
    video_encoding_jobs::table
        .filter(video_encoding_jobs::video_id.eq_any(videos))
        .select(video_encoding_jobs::id)
        .order(video_encoding_jobs::id)
        .for_update()
        .load(conn)
        .await
}
