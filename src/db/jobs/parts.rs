//! A split video's jobs: the head (the video's own job) that plans and later stitches, and its
//! parts (chunks and the audio), ordinary jobs on the same queue. The statements here write the
//! plan with its parts, complete a part and make the stitch claimable once the last one is
//! done, close every open job of a video at once, and read the plan, the parts and the progress.
//!
//! A part's transactions lock its head's row first (`FOR UPDATE`, after the video by lock
//! order), so two parts that complete at once take turns, and the second one sees the first
//! one's completion: exactly one of them wakes the stitch.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::finalize::{AttemptEnd, LOG_ATTEMPT, fenced};
use crate::db::CountRow;
use crate::domain::ids::{ClaimToken, VideoId};
use crate::domain::job::JobKind;

/// Writes the parts of the head job `id` (held under `token`) and parks the head as its
/// stitch: the plan on its row, kind `stitch`, PENDING but claimable never (`available_at`
/// infinity) until its last part completes ([`wake_stitch`]). Its attempts count on: the
/// planning was attempt 1 (or 2), the stitch is the next (I6: at most 3 per job per run, each
/// numbered once). The planning attempt is logged as `planned`.
/// Fenced on the claim, the LAST statement; 0 rows: the claim was lost, and the caller rolls
/// the parts back with the rest of its transaction.
pub async fn plan_parts(
    conn: &mut AsyncPgConnection,
    id: i64,
    token: ClaimToken,
    plan: &serde_json::Value,
    parts: &[(JobKind, i32)],
    end: AttemptEnd<'_>,
) -> QueryResult<usize> {
    use diesel::sql_types::{Array, BigInt, Integer, Jsonb, Text, Uuid as SqlUuid};
    let kinds: Vec<&str> = parts.iter().map(|(kind, _)| kind.as_str()).collect();
    let numbers: Vec<i32> = parts.iter().map(|(_, part)| *part).collect();
    let inserted = diesel::sql_query(
        "INSERT INTO video_encoding_jobs (video_id, original_s3_key, kind, run, parent_id, part)
         SELECT h.video_id, h.original_s3_key, p.kind, h.run, h.id, p.part
           FROM video_encoding_jobs h, unnest($3::text[], $4::int4[]) AS p (kind, part)
          WHERE h.id = $1 AND h.status = 'PROCESSING' AND h.claim_token = $2",
    )
    .bind::<BigInt, _>(id)
    .bind::<SqlUuid, _>(token)
    .bind::<Array<Text>, _>(kinds)
    .bind::<Array<Integer>, _>(numbers)
    .execute(conn)
    .await?;
    if inserted != parts.len() {
        return Ok(0);
    }
    let park = "UPDATE video_encoding_jobs
                   SET status = 'PENDING', kind = 'stitch', plan = $6,
                       available_at = 'infinity', claim_token = NULL, claimed_by = NULL,
                       claimed_at = NULL, lease_until = NULL, last_error = NULL
                 WHERE id = $1 AND status = 'PROCESSING' AND claim_token = $2
                   AND lease_until > statement_timestamp()";
    fenced_query!(fenced(park), id, token, end)
        .bind::<Jsonb, _>(plan)
        .get_result(conn)
        .await
        .map(CountRow::rows)
}

/// Locks a part's head job (`FOR UPDATE`): the first statement on jobs of every transaction
/// that ends a part. Returns the head's run; `None` if it is gone (the video was deleted).
pub async fn lock_head(conn: &mut AsyncPgConnection, head: i64) -> QueryResult<Option<i32>> {
    use crate::db::schema::video_encoding_jobs as jobs;
    jobs::table
        .filter(jobs::id.eq(head))
        .select(jobs::run)
        .for_update()
        .first(conn)
        .await
        .optional()
}

/// Makes the stitch of `head` claimable now if every part of its run is COMPLETED and it is
/// still waiting for them; in the transaction that completed a part, after [`lock_head`].
/// Returns 1 when this call woke it (exactly one part's transaction does).
pub async fn wake_stitch(conn: &mut AsyncPgConnection, head: i64) -> QueryResult<usize> {
    diesel::sql_query(
        "UPDATE video_encoding_jobs h
            SET available_at = statement_timestamp(), enqueued_at = statement_timestamp()
          WHERE h.id = $1 AND h.kind = 'stitch' AND h.status = 'PENDING'
            AND h.available_at = 'infinity'
            AND NOT EXISTS (SELECT 1 FROM video_encoding_jobs p
                             WHERE p.parent_id = h.id AND p.run = h.run
                               AND p.status <> 'COMPLETED')",
    )
    .bind::<diesel::sql_types::BigInt, _>(head)
    .execute(conn)
    .await
}

/// Why a split video's open jobs are closed, as their `last_error` and the attempt log say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// An operator cancelled the video.
    Cancelled,
    /// The video failed (a part, or the stitch).
    VideoFailed,
}

impl Closed {
    /// (`last_error`, the attempt log's error code and message).
    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Cancelled => (
                "cancelled with its video",
                "cancelled",
                "an operator cancelled the video",
            ),
            Self::VideoFailed => (
                "closed with its failed video",
                "video_failed",
                "another job of the video failed it",
            ),
        }
    }
}

/// Closes every open job of a split video (its head and its parts, PENDING or PROCESSING) as
/// COMPLETED with no claim, `why` in its `last_error`; a running attempt is logged as lost
/// with `why`'s code (its worker, finding its fence gone at its next heartbeat, stops and
/// logs nothing more). Returns how many it closed.
pub async fn close_family(
    conn: &mut AsyncPgConnection,
    head: i64,
    why: Closed,
) -> QueryResult<usize> {
    let (last_error, code, message) = why.words();
    diesel::sql_query(format!(
        "WITH prior AS (
             SELECT id, run, attempt_count, claim_token, claimed_by, claimed_at
               FROM video_encoding_jobs
              WHERE (id = $1 OR parent_id = $1) AND status = 'PROCESSING'),
         done AS (
             UPDATE video_encoding_jobs
                SET status = 'COMPLETED', completed_at = statement_timestamp(), claim_token = NULL,
                    claimed_by = NULL, claimed_at = NULL, lease_until = NULL,
                    last_error = coalesce(last_error, $2)
              WHERE (id = $1 OR parent_id = $1) AND status IN ('PENDING', 'PROCESSING')
             RETURNING id),
         logged AS ({LOG_ATTEMPT}
             SELECT p.id, p.run, p.attempt_count, p.claim_token, p.claimed_by,
                    coalesce(p.claimed_at, statement_timestamp()), statement_timestamp(), 'lost',
                    $3, $4
               FROM prior p JOIN done d ON d.id = p.id
             ON CONFLICT (claim_token) DO NOTHING)
         SELECT count(*) AS n FROM done"
    ))
    .bind::<diesel::sql_types::BigInt, _>(head)
    .bind::<diesel::sql_types::Text, _>(last_error)
    .bind::<diesel::sql_types::Text, _>(code)
    .bind::<diesel::sql_types::Text, _>(message)
    .get_result(conn)
    .await
    .map(CountRow::rows)
}

/// Deletes the parts of `head` (an operator retry starts the video over; a part that sends
/// the video to the whole encode). Their attempt log goes with them.
pub async fn delete_parts(conn: &mut AsyncPgConnection, head: i64) -> QueryResult<usize> {
    use crate::db::schema::video_encoding_jobs as jobs;
    diesel::delete(jobs::table.filter(jobs::parent_id.eq(head)))
        .execute(conn)
        .await
}

/// A split video that a part sends to the whole encode: its head, parked as the stitch, goes
/// back to an `encode` of the whole video (`whole`, so it is never split again), claimable at
/// once, its attempts counted on from its planning (I6). In the part's transaction, under the
/// head's lock, after the part's own fenced statement. Returns 1, or 0 if the head was not
/// waiting for its parts (a cancel or another part's fallback came first).
pub async fn head_to_whole(
    conn: &mut AsyncPgConnection,
    head: i64,
    why: &str,
) -> QueryResult<usize> {
    diesel::sql_query(
        "UPDATE video_encoding_jobs
            SET kind = 'encode', whole = true, plan = NULL,
                available_at = statement_timestamp(), enqueued_at = statement_timestamp(),
                last_error = $2
          WHERE id = $1 AND kind = 'stitch' AND status = 'PENDING' AND parent_id IS NULL",
    )
    .bind::<diesel::sql_types::BigInt, _>(head)
    .bind::<diesel::sql_types::Text, _>(why)
    .execute(conn)
    .await
}

/// What a part or a stitch reads of its head: the plan, the run, and whether the video must
/// be encoded whole.
#[derive(Debug, Clone, QueryableByName)]
pub struct HeadPlan {
    /// The plan (`None`: not planned, or encoded whole).
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Jsonb>)]
    pub plan: Option<serde_json::Value>,
    /// The head's run.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub run: i32,
    /// Never split this video.
    #[diesel(sql_type = diesel::sql_types::Bool)]
    pub whole: bool,
}

/// The plan of the head job `head`; `None` if the job is gone.
pub async fn head_plan(conn: &mut AsyncPgConnection, head: i64) -> QueryResult<Option<HeadPlan>> {
    diesel::sql_query("SELECT plan, run, whole FROM video_encoding_jobs WHERE id = $1")
        .bind::<diesel::sql_types::BigInt, _>(head)
        .get_result(conn)
        .await
        .optional()
}

/// A completed part, as the stitch reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, QueryableByName)]
pub struct DonePart {
    /// Its number.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub part: i32,
    /// The attempt that completed it (its outputs are under that attempt's prefix).
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub attempt: i32,
}

/// The completed parts of `head`'s current run, in part order.
pub async fn done_parts(conn: &mut AsyncPgConnection, head: i64) -> QueryResult<Vec<DonePart>> {
    diesel::sql_query(
        "SELECT p.part, p.attempt_count AS attempt
           FROM video_encoding_jobs p JOIN video_encoding_jobs h ON h.id = p.parent_id
          WHERE p.parent_id = $1 AND p.run = h.run AND p.status = 'COMPLETED'
          ORDER BY p.part",
    )
    .bind::<diesel::sql_types::BigInt, _>(head)
    .load(conn)
    .await
}

/// How far a split video's encoding is: parts done of all its parts, the stitch counted as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, QueryableByName)]
pub struct Progress {
    /// The video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub video_id: Uuid,
    /// Parts completed (and the stitch, once READY).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub done: i64,
    /// Every part and the stitch.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub total: i64,
}

/// The progress of those of `videos` that are split and still encoding (one statement).
pub async fn progress_of(
    conn: &mut AsyncPgConnection,
    videos: &[VideoId],
) -> QueryResult<Vec<Progress>> {
    if videos.is_empty() {
        return Ok(Vec::new());
    }
    diesel::sql_query(
        "SELECT h.video_id,
                count(p.id) FILTER (WHERE p.status = 'COMPLETED') AS done,
                count(p.id) + 1 AS total
           FROM video_encoding_jobs h
           JOIN video_encoding_jobs p ON p.parent_id = h.id AND p.run = h.run
          WHERE h.video_id = ANY($1) AND h.parent_id IS NULL AND h.kind = 'stitch'
            AND h.status IN ('PENDING', 'PROCESSING')
          GROUP BY h.video_id",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(videos)
    .load(conn)
    .await
}
