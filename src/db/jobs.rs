//! Encoding jobs: the queue itself.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::CountRow;
use super::schema::video_encoding_jobs;
use crate::domain::job::{JobKind, Outcome};

/// The channel workers LISTEN on; a transaction that makes a job claimable NOTIFYs it.
pub const JOBS_CHANNEL: &str = "vidq_jobs";

/// Enqueues a PENDING job of `kind` for a video; joins the caller's transaction.
pub async fn insert(
    mut conn: &AsyncPgConnection,
    video: Uuid,
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
    videos: Vec<Uuid>,
    original_keys: Vec<String>,
    kind: JobKind,
) -> QueryResult<Vec<(Uuid, i64)>> {
    use diesel::sql_types::{Array, BigInt, Text, Uuid as SqlUuid};
    #[derive(QueryableByName)]
    struct Inserted {
        #[diesel(sql_type = SqlUuid)]
        video_id: Uuid,
        #[diesel(sql_type = BigInt)]
        id: i64,
    }
    let inserted: Vec<Inserted> = super::prepared::prepared(
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
    super::prepared::prepared(format!("NOTIFY {JOBS_CHANNEL}"))
        .execute(&mut conn)
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

/// A claim: the job, the token that fences every later write, the run and the attempt number.
#[derive(Debug, Clone, diesel::QueryableByName)]
pub struct ClaimedJob {
    /// Job id.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub id: i64,
    /// Its video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub video_id: Uuid,
    /// Where the original is.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub original_s3_key: String,
    /// `encode` or `repackage`.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub kind: String,
    /// The fencing token of this claim.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub claim_token: Uuid,
    /// This attempt's number within its run (1 to `MAX_ATTEMPTS`).
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub attempt_count: i32,
    /// The run (1, then one more for each operator retry).
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub run: i32,
    /// Seconds from the job's enqueueing to this claim, both by the database's clock.
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub queued_secs: f64,
}

/// The claim: the seed's single statement (one row, fixed order, `FOR UPDATE OF j SKIP
/// LOCKED LIMIT 1`, PENDING-and-available OR PROCESSING-with-an-expired-lease, attempts left),
/// in one autocommitted statement. The attempt it opens lives on the job row (`claimed_by`,
/// `claimed_at`, the token): nothing is written to the attempt log unless the claim takes over
/// an expired lease, whose attempt it logs as lost from the row's values before the update.
/// With `video_encoding_jobs_claimable_idx` the candidate scan is an Index Scan that stops at
/// the first claimable row.
///
/// The claim alone commits without waiting for its WAL flush (`synchronous_commit` off for
/// its own transaction only): one fsync less per job and on every pickup. PostgreSQL
/// crashing within a fraction of a second of that commit can lose the claim: the job comes
/// back as it was (same state and attempt number, no attempt row), while the worker that was
/// answered holds a token no row knows. That is safe because every write of an attempt
/// outside its scratch directory comes after a synchronous commit fenced on that token (the
/// artifact ledger before the first PUT, the live original's row, every heartbeat, the
/// finalize). A statement that saw the claim ran after the claim's commit record entered the
/// WAL, so the synchronous commit of its transaction flushes the claim too: once such a fence
/// has passed and committed, the claim is durable; if the claim was lost, the fence matches
/// nothing and the worker stops, the claim lost, before it has written anything. So a
/// re-claim under the same attempt number (and object prefix) never meets a writer of the
/// lost claim (I2, I3, I5), and the lost attempt is not counted (I6). The cost of a loss is
/// the encoding the worker throws away.
pub const CLAIM_SQL: &str = "
WITH clock AS (
    SELECT statement_timestamp() AS now,
           set_config('synchronous_commit', 'off', true) AS commit_mode
), candidate AS (
    SELECT j.id, j.status AS was, j.claim_token AS was_token, j.claimed_by AS was_node,
           j.claimed_at AS was_claimed_at, j.attempt_count AS was_attempt, j.run AS was_run
    FROM video_encoding_jobs j
    CROSS JOIN clock c
    WHERE (j.status = 'PENDING'    AND j.available_at <= c.now AND j.attempt_count < 3)
       OR (j.status = 'PROCESSING' AND j.lease_until  <= c.now AND j.attempt_count < 3)
    ORDER BY j.available_at, j.id
    FOR UPDATE OF j SKIP LOCKED
    LIMIT 1
), claimed AS (
    UPDATE video_encoding_jobs j
    SET status = 'PROCESSING',
        attempt_count = j.attempt_count + 1,
        claim_token = $1,
        claimed_by = $2,
        lease_until = c.now + make_interval(secs => $3),
        claimed_at = c.now
    FROM candidate, clock c
    WHERE j.id = candidate.id
    RETURNING j.id, j.video_id, j.original_s3_key, j.kind, j.claim_token, j.attempt_count, j.run,
              extract(epoch FROM c.now - j.enqueued_at)::float8 AS queued_secs
), superseded AS (
    INSERT INTO job_attempt_log (job_id, run, attempt, claim_token, node_id, started_at, ended_at,
                                 outcome, error_code)
    SELECT id, was_run, was_attempt, was_token, was_node,
           coalesce(was_claimed_at, statement_timestamp()), statement_timestamp(), 'lost', 'lease_expired'
    FROM candidate
    WHERE was = 'PROCESSING'
    ON CONFLICT (claim_token) DO NOTHING
)
SELECT id, video_id, original_s3_key, kind, claim_token, attempt_count, run, queued_secs FROM claimed";

/// Claims the next job for `node` with a lease of `lease_secs`; commits at once. Takes a
/// shared connection so that it can also be sent behind another transaction's `COMMIT`, in
/// the same round trip ([`super::pipeline::Pipeline::run_then`]).
pub async fn claim(
    mut conn: &AsyncPgConnection,
    node: &str,
    lease_secs: f64,
) -> QueryResult<Option<ClaimedJob>> {
    use diesel::sql_types::{Double, Text, Uuid as SqlUuid};
    super::prepared::prepared(CLAIM_SQL)
        .bind::<SqlUuid, _>(Uuid::now_v7())
        .bind::<Text, _>(node)
        .bind::<Double, _>(lease_secs)
        .get_result(&mut conn)
        .await
        .optional()
}

/// [`CLAIM_SQL`] for up to `most` jobs in one statement, each with its own token: the tokens
/// come as `$1`, an array, and the claimed rows take them in id order. A worker with several
/// free slots fills them in one round trip and one commit instead of one per slot.
///
/// `most` is written into the text, not bound. Behind `LIMIT $n` PostgreSQL cannot know how
/// many rows the claim takes and assumes a tenth of the queue, so its generic plan finds the
/// claimed rows again with a scan of the whole table; it therefore planned the statement anew
/// on every execution. With the number in the text, each slot count is its own statement,
/// planned a few times and then run from its generic plan, which looks each row up by key.
pub fn claim_some_sql(most: usize) -> String {
    static PARTS: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    let (head, tail) = PARTS.get_or_init(|| {
        let one_token = "claim_token = $1,";
        let one_job = "LIMIT 1\n";
        assert_eq!(
            CLAIM_SQL.matches(one_token).count(),
            1,
            "the claim names its token once"
        );
        assert_eq!(
            CLAIM_SQL.matches(one_job).count(),
            1,
            "the claim has one LIMIT"
        );
        let sql = CLAIM_SQL.replacen(
            one_token,
            "claim_token = ($1::uuid[])[(SELECT count(*) FROM candidate earlier
                                          WHERE earlier.id < j.id) + 1],",
            1,
        );
        let (head, tail) = sql.split_once(one_job).expect("the claim has one LIMIT");
        (head.to_owned(), tail.to_owned())
    });
    format!("{head}LIMIT {most}\n{tail}")
}

/// Claims up to `most` jobs for `node` at once ([`claim_some_sql`]), in queue order; commits
/// at once, as [`claim`] does. Fewer than `most` (none included) means nothing more was
/// claimable.
pub async fn claim_some(
    mut conn: &AsyncPgConnection,
    node: &str,
    lease_secs: f64,
    most: usize,
) -> QueryResult<Vec<ClaimedJob>> {
    use diesel::sql_types::{Array, Double, Text, Uuid as SqlUuid};
    let tokens: Vec<Uuid> = (0..most).map(|_| Uuid::now_v7()).collect();
    let mut claimed: Vec<ClaimedJob> = super::prepared::prepared(claim_some_sql(most))
        .bind::<Array<SqlUuid>, _>(tokens)
        .bind::<Text, _>(node)
        .bind::<Double, _>(lease_secs)
        .load(&mut conn)
        .await?;
    // RETURNING follows no order; id order is the order their tokens were given in.
    claimed.sort_by_key(|job| job.id);
    Ok(claimed)
}

/// Extends a live claim's lease. 0 rows: the claim is gone (reclaimed, cancelled, deleted).
pub async fn heartbeat(
    conn: &mut AsyncPgConnection,
    id: i64,
    token: Uuid,
    lease_secs: f64,
) -> QueryResult<usize> {
    use diesel::sql_types::{BigInt, Double, Uuid as SqlUuid};
    super::prepared::prepared(
        "UPDATE video_encoding_jobs SET lease_until = statement_timestamp() + make_interval(secs => $3)
          WHERE id = $1 AND status = 'PROCESSING' AND claim_token = $2",
    )
    .bind::<BigInt, _>(id)
    .bind::<SqlUuid, _>(token)
    .bind::<Double, _>(lease_secs)
    .execute(conn)
    .await
}

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
fn fenced(job_update: &str) -> String {
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
pub(super) const LOG_ATTEMPT: &str = "INSERT INTO job_attempt_log
    (job_id, run, attempt, claim_token, node_id, started_at, ended_at, outcome, error_code, error_message)";

macro_rules! fenced_query {
    ($sql:expr, $id:expr, $token:expr, $end:expr) => {{
        use diesel::sql_types::{BigInt, Nullable, Text, Uuid as SqlUuid};
        super::prepared::prepared($sql)
            .bind::<BigInt, _>($id)
            .bind::<SqlUuid, _>($token)
            .bind::<Text, _>($end.outcome.as_str())
            .bind::<Nullable<Text>, _>($end.error.map(|e| e.0))
            .bind::<Nullable<Text>, _>($end.error.map(|e| e.1))
    }};
}

/// The message of the error `vidq_claim_held` raises (migration 000011): diesel does not
/// surface SQLSTATEs, and this text is vidq's own.
pub const CLAIM_LOST_MESSAGE: &str = "vidq: the claim was lost";

/// The fenced completion, the LAST statement of a finalize: 0 means the claim was lost. A
/// fence that matches nothing also fails the statement on the server (`vidq_claim_held`), so
/// the transaction is already failed and its COMMIT, even one sent in the same pipeline
/// (`super::pipeline`), rolls it back. An attempt that completes stays on the job row, where
/// the `job_attempts` view reads it, so a READY finalize writes nothing to the attempt log;
/// any other outcome (a FAILED finalize) is logged with its error.
pub async fn complete(
    mut conn: &AsyncPgConnection,
    id: i64,
    token: Uuid,
    end: AttemptEnd<'_>,
) -> QueryResult<usize> {
    const COMPLETE: &str = "UPDATE video_encoding_jobs
            SET status = 'COMPLETED', completed_at = statement_timestamp()
          WHERE id = $1 AND status = 'PROCESSING' AND claim_token = $2
            AND lease_until > statement_timestamp()";
    const HELD: &str = "vidq_claim_held(count(*))";
    let query = if end.outcome == Outcome::Completed {
        use diesel::sql_types::{BigInt, Uuid as SqlUuid};
        super::prepared::prepared(format!(
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
    super::fence_answer(answer, CLAIM_LOST_MESSAGE)
}

/// [`complete`] for the READY finalizes of a batch, as one statement and the LAST of the
/// batch's transaction: every job `ids[i]` still held under `tokens[i]` becomes COMPLETED,
/// and if any of them is not, the statement raises `vidq_claim_held`'s error and the whole
/// transaction rolls back, as one fence of a finalize alone does. Returns how many it
/// completed (all of them), or 0 when the error was the fence's.
pub async fn complete_all(
    mut conn: &AsyncPgConnection,
    ids: Vec<i64>,
    tokens: Vec<Uuid>,
) -> QueryResult<usize> {
    use diesel::sql_types::{Array, BigInt, Uuid as SqlUuid};
    let expected = i64::try_from(ids.len()).unwrap_or(i64::MAX);
    let answer = super::prepared::prepared(
        "WITH held AS (SELECT * FROM unnest($1::int8[], $2::uuid[]) AS h (id, token)),
         done AS (
             UPDATE video_encoding_jobs j
                SET status = 'COMPLETED', completed_at = statement_timestamp()
               FROM held
              WHERE j.id = held.id AND j.status = 'PROCESSING' AND j.claim_token = held.token
                AND j.lease_until > statement_timestamp()
             RETURNING j.id)
         SELECT vidq_claim_held(CASE count(*) WHEN $3 THEN count(*) ELSE 0 END) AS n FROM done",
    )
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
    token: Uuid,
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

/// Graceful release (the seed's statement): back to PENDING with the attempt given back, so
/// the next node starts with the same attempt number. Fenced on the token and a live lease.
pub async fn release(
    conn: &mut AsyncPgConnection,
    id: i64,
    token: Uuid,
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

/// Fenced `PROCESSING -> DEAD`, closed (`completed_at`) at once; the LAST statement of the
/// reaper's transaction. 0: someone else reaped it.
pub async fn mark_dead(
    conn: &mut AsyncPgConnection,
    id: i64,
    token: Uuid,
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
    pub claim_token: Uuid,
    /// The run it died in.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub run: i32,
}

/// Up to `limit` jobs that died in their last attempt (served by the last-attempt index).
pub async fn dead_candidates(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> QueryResult<Vec<DeadCandidate>> {
    super::prepared::prepared(
        "SELECT j.id, j.video_id, j.claim_token, j.run
           FROM video_encoding_jobs j
          WHERE j.status = 'PROCESSING' AND j.attempt_count >= 3 AND j.lease_until <= statement_timestamp()
          ORDER BY j.lease_until
          LIMIT $1",
    )
    .bind::<diesel::sql_types::BigInt, _>(limit)
    .load(conn)
    .await
}

/// A job as operators see it.
#[derive(Debug, Clone, diesel::QueryableByName, serde::Serialize)]
pub struct JobSummary {
    /// Job id.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub id: i64,
    /// Its video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub video_id: Uuid,
    /// The video's owner.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub owner_id: Uuid,
    /// Queue state.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub status: String,
    /// The video's status.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub video_status: String,
    /// The run (1, then one more for each operator retry).
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub run: i32,
    /// Attempts so far in this run.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub attempt_count: i32,
    /// Holder of the current claim.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub claimed_by: Option<String>,
    /// Lease end of the current claim.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub lease_until: Option<chrono::DateTime<chrono::Utc>>,
    /// When it may be claimed.
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    pub available_at: chrono::DateTime<chrono::Utc>,
    /// Enqueued.
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    pub enqueued_at: chrono::DateTime<chrono::Utc>,
    /// Finished.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The last retryable error.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub last_error: Option<String>,
}

const SUMMARY_SELECT: &str =
    "SELECT j.id, j.video_id, v.owner_id, j.status, v.status AS video_status, j.run, j.attempt_count,
        j.claimed_by, j.lease_until, j.available_at, j.enqueued_at, j.completed_at, j.last_error
   FROM video_encoding_jobs j JOIN videos v ON v.id = j.video_id";

/// Newest jobs first, optionally in one status.
pub async fn list(
    conn: &mut AsyncPgConnection,
    status: Option<&str>,
    limit: i64,
) -> QueryResult<Vec<JobSummary>> {
    use diesel::sql_types::{BigInt, Nullable, Text};
    super::prepared::prepared(format!(
        "{SUMMARY_SELECT} WHERE ($1::text IS NULL OR j.status = $1) ORDER BY j.id DESC LIMIT $2"
    ))
    .bind::<Nullable<Text>, _>(status)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}

/// One job.
pub async fn find(conn: &mut AsyncPgConnection, id: i64) -> QueryResult<Option<JobSummary>> {
    super::prepared::prepared(format!("{SUMMARY_SELECT} WHERE j.id = $1"))
        .bind::<diesel::sql_types::BigInt, _>(id)
        .get_result(conn)
        .await
        .optional()
}

/// An attempt of a job.
#[derive(Debug, Clone, diesel::QueryableByName, serde::Serialize)]
pub struct AttemptSummary {
    /// The run it belongs to.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub run: i32,
    /// Attempt number within its run.
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub attempt: i32,
    /// Node that ran it.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub node_id: String,
    /// Claimed at.
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// Ended at.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub ended_at: Option<chrono::DateTime<chrono::Utc>>,
    /// How it ended.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub outcome: Option<String>,
    /// Error code, if any.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub error_code: Option<String>,
    /// Error detail, if any.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub error_message: Option<String>,
}

/// Every attempt of a job, in the order they started (the logged ones and the job's own).
pub async fn attempts_of(
    conn: &mut AsyncPgConnection,
    id: i64,
) -> QueryResult<Vec<AttemptSummary>> {
    super::prepared::prepared(
        "SELECT run, attempt, node_id, started_at, ended_at, outcome, error_code, error_message
           FROM job_attempts WHERE job_id = $1 ORDER BY started_at, id",
    )
    .bind::<diesel::sql_types::BigInt, _>(id)
    .load(conn)
    .await
}

/// Locks one job `FOR UPDATE` (after its video, by lock order); returns its status and run.
pub async fn lock_status(
    conn: &mut AsyncPgConnection,
    id: i64,
) -> QueryResult<Option<(String, i32)>> {
    video_encoding_jobs::table
        .filter(video_encoding_jobs::id.eq(id))
        .select((video_encoding_jobs::status, video_encoding_jobs::run))
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
    super::prepared::prepared(
        "UPDATE video_encoding_jobs
            SET status = 'PENDING', run = run + 1, attempt_count = 0, available_at = statement_timestamp(),
                enqueued_at = statement_timestamp(), completed_at = NULL, claim_token = NULL,
                claimed_by = NULL, claimed_at = NULL, lease_until = NULL, last_error = NULL
          WHERE id = $1 AND status = $2",
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
    super::prepared::prepared(format!(
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

#[cfg(test)]
mod tests {
    use crate::domain::job::MAX_ATTEMPTS;

    /// The statements keep the budget as a literal (the planner must see it to use the
    /// last-attempt partial index for the reaper and to rule it out for the claim), so this
    /// checks every comparison of `attempt_count` in this file against [`MAX_ATTEMPTS`].
    #[test]
    fn every_attempt_count_comparison_uses_max_attempts() {
        let source = include_str!("jobs.rs");
        let mut seen = 0;
        for op in ["attempt_count < ", "attempt_count >= "] {
            for (at, _) in source.match_indices(op) {
                let rest = &source[at + op.len()..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                if digits.is_empty() {
                    continue;
                }
                assert_eq!(digits.parse::<i32>().unwrap(), MAX_ATTEMPTS, "{op}{digits}");
                seen += 1;
            }
        }
        assert!(seen >= 5, "found {seen} comparisons");
    }
}
