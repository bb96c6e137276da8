//! The attempt ledger: a row per claim (opened by the claim statement itself), closed with
//! its outcome by whoever ends the attempt.

use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::domain::job::Outcome;

/// Closes the attempt opened by the claim with this token (once: an attempt already closed
/// keeps its first outcome).
pub async fn finish(
    conn: &mut AsyncPgConnection,
    token: Uuid,
    outcome: Outcome,
    error: Option<(&str, &str)>,
) -> diesel::QueryResult<usize> {
    use diesel::sql_types::{Nullable, Text, Uuid as SqlUuid};
    super::prepared::prepared(
        "UPDATE job_attempts SET ended_at = statement_timestamp(), outcome = $2, error_code = $3, error_message = $4
          WHERE claim_token = $1 AND ended_at IS NULL",
    )
    .bind::<SqlUuid, _>(token)
    .bind::<Text, _>(outcome.as_str())
    .bind::<Nullable<Text>, _>(error.map(|e| e.0))
    .bind::<Nullable<Text>, _>(error.map(|e| e.1))
    .execute(conn)
    .await
}

#[derive(diesel::QueryableByName)]
struct Found {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    found: bool,
}

/// Whether the attempt with this token was closed with `outcome`: after a finalize whose
/// COMMIT got no reply, this tells whether it committed.
pub async fn ended_with(
    conn: &mut AsyncPgConnection,
    token: Uuid,
    outcome: Outcome,
) -> diesel::QueryResult<bool> {
    use diesel::sql_types::{Text, Uuid as SqlUuid};
    super::prepared::prepared(
        "SELECT EXISTS (SELECT 1 FROM job_attempts WHERE claim_token = $1 AND outcome = $2) AS found",
    )
    .bind::<SqlUuid, _>(token)
    .bind::<Text, _>(outcome.as_str())
    .get_result::<Found>(conn)
    .await
    .map(|row| row.found)
}
