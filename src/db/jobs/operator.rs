//! Statements run on jobs by someone other than the worker holding them: the reaper, which
//! buries jobs whose last attempt's lease ran out, and an operator's retry or cancel.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::finalize::{AttemptEnd, LOG_ATTEMPT, fenced};
use crate::db::CountRow;
use crate::db::schema::video_encoding_jobs;
use crate::domain::ids::ClaimToken;

/// Fenced `PROCESSING -> DEAD`, closed (`completed_at`) at once; the LAST statement of the
/// reaper's transaction. 0: someone else reaped it.
pub async fn mark_dead(
    conn: &mut AsyncPgConnection,
    id: i64,
    token: ClaimToken,
    end: AttemptEnd<'_>,
) -> QueryResult<usize> {
    let sql = "UPDATE video_encoding_jobs
                  SET status = 'DEAD', completed_at = statement_timestamp(), last_error = 'lease_expired'
                WHERE id = $1 AND status = 'PROCESSING' AND claim_token = $2
                  AND attempt_count >= 3 AND lease_until <= statement_timestamp()";
    fenced_query!(fenced(sql), id, token, end)
        .get_result(conn)
        .await
        .map(CountRow::rows)
}

/// A job whose last attempt's lease ran out.
#[derive(Debug, Clone, diesel::QueryableByName)]
pub struct DeadCandidate {
    /// Job id.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub id: i64,
    /// Its video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub video_id: Uuid,
    /// The expired claim's token.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub claim_token: ClaimToken,
    /// The run it died in.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub run: i32,
    /// A part's head job (`None`: the video's own job).
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    pub parent_id: Option<i64>,
    /// What it was doing.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub kind: crate::domain::job::JobKind,
}

/// Up to `limit` jobs that died in their last attempt (served by the last-attempt index).
pub async fn dead_candidates(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> QueryResult<Vec<DeadCandidate>> {
    crate::db::prepared::prepared(
        "SELECT j.id, j.video_id, j.claim_token, j.run, j.parent_id, j.kind
           FROM video_encoding_jobs j
          WHERE j.status = 'PROCESSING' AND j.attempt_count >= 3 AND j.lease_until <= statement_timestamp()
          ORDER BY j.lease_until
          LIMIT $1",
    )
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .load(conn)
    .await
}

/// Locks one job `FOR UPDATE` (after its video, by lock order); returns its status, run and,
/// for a part of a split video, its head job.
pub async fn lock_status(
    conn: &mut AsyncPgConnection,
    id: i64,
) -> QueryResult<Option<(String, i32, Option<i64>)>> {
    video_encoding_jobs::table
        .filter(video_encoding_jobs::id.eq(id))
        .select((
            video_encoding_jobs::status,
            video_encoding_jobs::run,
            video_encoding_jobs::parent_id,
        ))
        .for_update()
        .first(conn)
        .await
        .optional()
}

/// Operator retry: CAS from `expected` back to PENDING as a new run with a fresh attempt
/// budget. The new run number keeps its attempts' keys and ledger rows apart from the old
/// run's, whose attempt numbers start over at 1.
pub async fn requeue(conn: &mut AsyncPgConnection, id: i64, expected: &str) -> QueryResult<usize> {
    // Clearing the claim takes the run's last attempt off the job row; it is in the attempt
    // log already, since only a DEAD job (logged by the reaper) or the job of a failed video
    // (logged by the FAILED finalize or the cancel) comes here.
    crate::db::prepared::prepared(
        "UPDATE video_encoding_jobs
            SET status = 'PENDING', run = run + 1, attempt_count = 0, available_at = statement_timestamp(),
                enqueued_at = statement_timestamp(), completed_at = NULL, claim_token = NULL,
                claimed_by = NULL, claimed_at = NULL, lease_until = NULL, last_error = NULL,
                kind = CASE WHEN kind = 'stitch' THEN 'encode' ELSE kind END, plan = NULL
          WHERE id = $1 AND status = $2 AND parent_id IS NULL",
    )
    .bind::<diesel::sql_types::BigInt, _>(id)
    .bind::<diesel::sql_types::Text, _>(expected)
    .execute(conn)
    .await
}

/// Operator cancel: CAS from `expected` (PENDING or PROCESSING) to a closed COMPLETED with no
/// claim, so a worker still running it finds its fence gone.
/// The running attempt, if any, is logged as lost in the same statement: a crashed worker
/// would never log it, and the job is never claimed again.
pub async fn cancel(conn: &mut AsyncPgConnection, id: i64, expected: &str) -> QueryResult<usize> {
    crate::db::prepared::prepared(format!(
        "WITH prior AS (
             SELECT run, attempt_count, claim_token, claimed_by, claimed_at FROM video_encoding_jobs
              WHERE id = $1 AND status = 'PROCESSING'),
         done AS (
             UPDATE video_encoding_jobs
                SET status = 'COMPLETED', completed_at = statement_timestamp(), claim_token = NULL,
                    claimed_by = NULL, claimed_at = NULL, lease_until = NULL,
                    last_error = 'cancelled by an operator'
              WHERE id = $1 AND status = $2
             RETURNING id),
         logged AS ({LOG_ATTEMPT}
             SELECT $1, p.run, p.attempt_count, p.claim_token, p.claimed_by,
                    coalesce(p.claimed_at, statement_timestamp()), statement_timestamp(), 'lost',
                    'cancelled', 'an operator cancelled the encoding'
               FROM prior p, done
             ON CONFLICT (claim_token) DO NOTHING)
         SELECT count(*) AS n FROM done"
    ))
    .bind::<diesel::sql_types::BigInt, _>(id)
    .bind::<diesel::sql_types::Text, _>(expected)
    .get_result(conn)
    .await
    .map(CountRow::rows)
}
