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
