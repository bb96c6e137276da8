//! The attempt ledger. A running attempt, and the one a job completes, live on the job row
//! (token, node, attempt, run, `claimed_at`); `job_attempt_log` keeps the attempts that ended
//! otherwise, each written once by whoever ended it (the fenced transition, the claim that
//! took over an expired lease, an operator's cancel, a worker that lost its claim). The view
//! `job_attempts` reads both as one row per attempt.

use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::domain::ids::ClaimToken;
use crate::domain::job::Outcome;

/// Logs the attempt of this claim as lost with `code` and `message`, if the job still holds
/// the claim (best effort: when it does not, whoever took it over logged the attempt, and
/// the claim that takes over an expired lease logs it too). An attempt already logged keeps
/// its first row.
pub async fn log_lost(
    conn: &mut AsyncPgConnection,
    job: i64,
    token: ClaimToken,
    code: &str,
    message: &str,
) -> diesel::QueryResult<usize> {
    use diesel::sql_types::{BigInt, Text, Uuid as SqlUuid};
    super::prepared::prepared(format!(
        "{log}
         SELECT j.id, j.run, j.attempt_count, j.claim_token, j.claimed_by,
                coalesce(j.claimed_at, statement_timestamp()), statement_timestamp(), 'lost', $3, $4
           FROM video_encoding_jobs j
          WHERE j.id = $1 AND j.claim_token = $2 AND j.status = 'PROCESSING'
         ON CONFLICT (claim_token) DO NOTHING",
        log = super::jobs::LOG_ATTEMPT
    ))
    .bind::<BigInt, _>(job)
    .bind::<SqlUuid, _>(token)
    .bind::<Text, _>(code)
    .bind::<Text, _>(message)
    .execute(conn)
    .await
}

#[derive(diesel::QueryableByName)]
struct Found {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    found: bool,
}

/// Whether the attempt of `job` with this token ended with `outcome`: after a finalize whose
/// COMMIT got no reply, this tells whether it committed. Read through the `job_attempts`
/// view, by job, so that both of its sides are index lookups.
pub async fn ended_with(
    conn: &mut AsyncPgConnection,
    job: i64,
    token: ClaimToken,
    outcome: Outcome,
) -> diesel::QueryResult<bool> {
    use diesel::sql_types::{BigInt, Text, Uuid as SqlUuid};
    super::prepared::prepared(
        "SELECT EXISTS (SELECT 1 FROM job_attempts WHERE job_id = $1 AND claim_token = $2 AND outcome = $3) AS found",
    )
    .bind::<BigInt, _>(job)
    .bind::<SqlUuid, _>(token)
    .bind::<Text, _>(outcome.as_str())
    .get_result::<Found>(conn)
    .await
    .map(|row| row.found)
}
