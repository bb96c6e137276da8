//! Claiming: how a worker takes jobs off the queue (one, or several in one statement) and
//! keeps its lease alive while it works.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::domain::ids::{ClaimToken, VideoId};

/// A claim: the job, the token that fences every later write, the run and the attempt number.
#[derive(Debug, Clone, diesel::QueryableByName)]
pub struct ClaimedJob {
    /// Job id.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub id: i64,
    /// Its video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub video_id: VideoId,
    /// Where the original is.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub original_s3_key: String,
    /// `encode` or `repackage`.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub kind: crate::domain::job::JobKind,
    /// The fencing token of this claim.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub claim_token: ClaimToken,
    /// This attempt's number within its run (1 to `MAX_ATTEMPTS`).
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub attempt_count: i32,
    /// The run (1, then one more for each operator retry).
    #[diesel(sql_type = diesel::sql_types::Integer)]
    pub run: i32,
    /// Seconds from the job's enqueueing to this claim, both by the database's clock.
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub queued_secs: f64,
    /// A part's head job (`None`: the video's own job).
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    pub parent_id: Option<i64>,
    /// A part's number.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Integer>)]
    pub part: Option<i32>,
}

/// The claim: one statement (one row, fixed order, `FOR UPDATE OF j SKIP
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
///
/// A session that sets `vidq.claim_synchronous_commit` to `on` (see
/// [`with_synchronous_claims`]) claims with its WAL flushed instead: `vidq bench queue`
/// measures both, so that the price of the flush is a number and not a guess.
pub const CLAIM_SQL: &str = "
WITH clock AS (
    SELECT statement_timestamp() AS now,
           set_config('synchronous_commit',
                      coalesce(nullif(current_setting('vidq.claim_synchronous_commit', true), ''), 'off'),
                      true) AS commit_mode
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
              extract(epoch FROM c.now - j.enqueued_at)::float8 AS queued_secs, j.parent_id, j.part
), superseded AS (
    INSERT INTO job_attempt_log (job_id, run, attempt, claim_token, node_id, started_at, ended_at,
                                 outcome, error_code)
    SELECT id, was_run, was_attempt, was_token, was_node,
           coalesce(was_claimed_at, statement_timestamp()), statement_timestamp(), 'lost', 'lease_expired'
    FROM candidate
    WHERE was = 'PROCESSING'
    ON CONFLICT (claim_token) DO NOTHING
)
SELECT id, video_id, original_s3_key, kind, claim_token, attempt_count, run, queued_secs, parent_id, part
  FROM claimed";

/// `url` with every session's claims committed with their WAL flush (`synchronous_commit`
/// left on for the claim, as for every other transaction): what a benchmark compares the
/// default with.
pub fn with_synchronous_claims(url: &str) -> Result<String, url::ParseError> {
    let mut parsed = url::Url::parse(url)?;
    // Spelled out: the form encoding's `+` for a space is not decoded by libpq's URL rules.
    let options = "options=-c%20vidq.claim_synchronous_commit%3Don";
    let query = match parsed.query() {
        Some(query) if !query.is_empty() => format!("{query}&{options}"),
        _ => options.to_owned(),
    };
    parsed.set_query(Some(&query));
    Ok(parsed.into())
}

/// Claims the next job for `node` with a lease of `lease_secs`; commits at once. Takes a
/// shared connection so that it can also be sent ahead of another transaction in the same
/// flight (`queue::claim_ahead`).
pub async fn claim(
    mut conn: &AsyncPgConnection,
    node: &str,
    lease_secs: f64,
) -> QueryResult<Option<ClaimedJob>> {
    use diesel::sql_types::{Double, Text, Uuid as SqlUuid};
    crate::db::prepared::prepared(CLAIM_SQL)
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
    let mut claimed: Vec<ClaimedJob> = crate::db::prepared::prepared(claim_some_sql(most))
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
    token: ClaimToken,
    lease_secs: f64,
) -> QueryResult<usize> {
    use diesel::sql_types::{BigInt, Double, Uuid as SqlUuid};
    crate::db::prepared::prepared(
        "UPDATE video_encoding_jobs SET lease_until = statement_timestamp() + make_interval(secs => $3)
          WHERE id = $1 AND status = 'PROCESSING' AND claim_token = $2",
    )
    .bind::<BigInt, _>(id)
    .bind::<SqlUuid, _>(token)
    .bind::<Double, _>(lease_secs)
    .execute(conn)
    .await
}
