//! How an attempt ends, written by the worker that holds the claim: the fenced completion
//! (alone or for a batch), a retry later, a graceful release. Every statement here is fenced
//! on the claim token, so a worker whose claim was lost changes nothing.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::CountRow;
use crate::domain::ids::ClaimToken;
use crate::domain::job::Outcome;

/// How a fenced transition closes the attempt it ends.
#[derive(Clone, Copy, Debug)]
pub struct AttemptEnd<'a> {
    /// The outcome recorded on the attempt.
    pub outcome: Outcome,
    /// Error code and message, if it ended with one.
    pub error: Option<(&'a str, &'a str)>,
}

/// One statement that applies `job_update` (fenced on `$1` id and `$2` claim token) and, only
/// if it matched, logs the claim's attempt as ended with `$3` outcome, `$4` code, `$5` message
/// (node, attempt, run and start from the job row as the statement found it, before the
/// update clears them). Returns how many jobs it changed: 0 means the claim is no longer ours.
pub(super) fn fenced(job_update: &str) -> String {
    fenced_counting(job_update, "count(*)")
}

/// [`fenced`], answering `counted`: `count(*)` over the changed jobs, or an SQL function of it.
fn fenced_counting(job_update: &str, counted: &str) -> String {
    format!(
        "WITH prior AS (
             SELECT run, attempt_count, claimed_by, claimed_at FROM video_encoding_jobs
              WHERE id = $1 AND claim_token = $2),
         done AS ({job_update} RETURNING id),
         logged AS ({LOG_ATTEMPT}
             SELECT $1, p.run, p.attempt_count, $2, p.claimed_by,
                    coalesce(p.claimed_at, statement_timestamp()), statement_timestamp(), $3, $4, $5
               FROM prior p, done
             ON CONFLICT (claim_token) DO NOTHING)
         SELECT {counted} AS n FROM done"
    )
}

/// The head of every insert into the attempt log. An attempt is logged once, when it ends: a
/// second writer (the claim taking over a lease that a worker has already logged as lost)
/// keeps the first row (`ON CONFLICT (claim_token) DO NOTHING`).
pub(in crate::db) const LOG_ATTEMPT: &str = "INSERT INTO job_attempt_log
    (job_id, run, attempt, claim_token, node_id, started_at, ended_at, outcome, error_code, error_message)";

/// The message of the error `vidq_claim_held` raises (migration 000011): diesel does not
/// surface SQLSTATEs, and this text is vidq's own.
pub const CLAIM_LOST_MESSAGE: &str = "vidq: the claim was lost";

/// The fenced completion, the LAST statement of a finalize: 0 means the claim was lost. A
/// fence that matches nothing also fails the statement on the server (`vidq_claim_held`), so
/// the transaction is already failed and its COMMIT, even one sent in the same pipeline
/// (`crate::db::pipelined`), rolls it back. An attempt that completes stays on the job row, where
/// the `job_attempts` view reads it, so a READY finalize writes nothing to the attempt log;
/// any other outcome (a FAILED finalize) is logged with its error.
pub async fn complete(
    mut conn: &AsyncPgConnection,
    id: i64,
    token: ClaimToken,
    end: AttemptEnd<'_>,
) -> QueryResult<usize> {
    const COMPLETE: &str = "UPDATE video_encoding_jobs
            SET status = 'COMPLETED', completed_at = statement_timestamp()
          WHERE id = $1 AND status = 'PROCESSING' AND claim_token = $2
            AND lease_until > statement_timestamp()";
    const HELD: &str = "vidq_claim_held(count(*))";
    let query = if end.outcome == Outcome::Completed {
        use diesel::sql_types::{BigInt, Uuid as SqlUuid};
        crate::db::prepared::prepared(format!(
            "WITH done AS ({COMPLETE} RETURNING id) SELECT {HELD} AS n FROM done"
        ))
        .bind::<BigInt, _>(id)
        .bind::<SqlUuid, _>(token)
    } else {
        fenced_query!(fenced_counting(COMPLETE, HELD), id, token, end)
    };
    held(query.get_result::<CountRow>(&mut conn).await)
}

/// What a fenced completion answered: the jobs it completed, 0 when its fence raised
/// `vidq_claim_held`'s error (the transaction is then failed on the server).
fn held(answer: QueryResult<CountRow>) -> QueryResult<usize> {
    crate::db::fence_answer(answer, CLAIM_LOST_MESSAGE)
}

/// The statement of [`complete_all`]: `$1` the job ids, `$2` their tokens, `$3` how many.
pub const COMPLETE_ALL_SQL: &str =
    "WITH held AS (SELECT * FROM unnest($1::int8[], $2::uuid[]) AS h (id, token)),
         done AS (
             UPDATE video_encoding_jobs j
                SET status = 'COMPLETED', completed_at = statement_timestamp()
               FROM held
              WHERE j.id = held.id AND j.status = 'PROCESSING' AND j.claim_token = held.token
                AND j.lease_until > statement_timestamp()
             RETURNING j.id)
         SELECT vidq_claim_held(CASE count(*) WHEN $3 THEN count(*) ELSE 0 END) AS n FROM done";

/// [`complete`] for the READY finalizes of a batch, as one statement and the LAST of the
/// batch's transaction: every job `ids[i]` still held under `tokens[i]` becomes COMPLETED,
/// and if any of them is not, the statement raises `vidq_claim_held`'s error and the whole
/// transaction rolls back, as one fence of a finalize alone does. Returns how many it
/// completed (all of them), or 0 when the error was the fence's.
pub async fn complete_all(
    mut conn: &AsyncPgConnection,
    ids: Vec<i64>,
    tokens: Vec<ClaimToken>,
) -> QueryResult<usize> {
    use diesel::sql_types::{Array, BigInt, Uuid as SqlUuid};
    let expected = i64::try_from(ids.len()).unwrap_or(i64::MAX);
    let answer = crate::db::prepared::prepared(COMPLETE_ALL_SQL)
        .bind::<Array<BigInt>, _>(ids)
        .bind::<Array<SqlUuid>, _>(tokens)
        .bind::<BigInt, _>(expected)
        .get_result::<CountRow>(&mut conn)
        .await;
    held(answer)
}

/// Fenced `PROCESSING -> PENDING` after a retryable error, claimable again after `delay_secs`.
pub async fn retry_later(
    conn: &mut AsyncPgConnection,
    id: i64,
    token: ClaimToken,
    end: AttemptEnd<'_>,
    delay_secs: f64,
) -> QueryResult<usize> {
    let sql = "UPDATE video_encoding_jobs
                  SET status = 'PENDING', available_at = statement_timestamp() + make_interval(secs => $6),
                      last_error = $4 || ': ' || $5, claim_token = NULL, claimed_by = NULL, claimed_at = NULL,
                      lease_until = NULL
                WHERE id = $1 AND status = 'PROCESSING' AND claim_token = $2
                  AND lease_until > statement_timestamp() AND attempt_count < 3";
    let query =
        fenced_query!(fenced(sql), id, token, end).bind::<diesel::sql_types::Double, _>(delay_secs);
    query.get_result(conn).await.map(CountRow::rows)
}

/// Graceful release: back to PENDING with the attempt given back, so
/// the next node starts with the same attempt number. Fenced on the token and a live lease.
pub async fn release(
    conn: &mut AsyncPgConnection,
    id: i64,
    token: ClaimToken,
    end: AttemptEnd<'_>,
) -> QueryResult<usize> {
    let sql = "UPDATE video_encoding_jobs
                  SET status = 'PENDING', attempt_count = attempt_count - 1,
                      claim_token = NULL, claimed_by = NULL, claimed_at = NULL, lease_until = NULL,
                      available_at = statement_timestamp()
                WHERE id = $1 AND status = 'PROCESSING' AND claim_token = $2
                  AND attempt_count > 0 AND lease_until > statement_timestamp()";
    fenced_query!(fenced(sql), id, token, end)
        .get_result(conn)
        .await
        .map(CountRow::rows)
}
