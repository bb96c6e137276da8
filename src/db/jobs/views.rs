//! Read-only views of jobs and their attempts, as operators see them (the admin API and
//! `vidq jobs`).

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

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
    pub status: crate::domain::job::JobStatus,
    /// The video's status.
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub video_status: crate::domain::video::VideoStatus,
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
    /// When it may be claimed (`None`: a split video's stitch, waiting for its parts).
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub available_at: Option<chrono::DateTime<chrono::Utc>>,
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
        j.claimed_by, j.lease_until, nullif(j.available_at, 'infinity') AS available_at, j.enqueued_at, j.completed_at, j.last_error
   FROM video_encoding_jobs j JOIN videos v ON v.id = j.video_id";

/// Newest jobs first, optionally in one status.
pub async fn list(
    conn: &mut AsyncPgConnection,
    status: Option<&str>,
    limit: i64,
) -> QueryResult<Vec<JobSummary>> {
    use diesel::sql_types::{BigInt, Nullable, Text};
    crate::db::prepared::prepared(format!(
        "{SUMMARY_SELECT} WHERE ($1::text IS NULL OR j.status = $1) ORDER BY j.id DESC LIMIT $2"
    ))
    .bind::<Nullable<Text>, _>(status)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}

/// One job.
pub async fn find(conn: &mut AsyncPgConnection, id: i64) -> QueryResult<Option<JobSummary>> {
    crate::db::prepared::prepared(format!("{SUMMARY_SELECT} WHERE j.id = $1"))
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
    pub outcome: Option<crate::domain::job::Outcome>,
    /// Error code, if any.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub error_code: Option<crate::domain::failure::FailureCode>,
    /// Error detail, if any.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    pub error_message: Option<String>,
}

/// Every attempt of a job, in the order they started (the logged ones and the job's own).
pub async fn attempts_of(
    conn: &mut AsyncPgConnection,
    id: i64,
) -> QueryResult<Vec<AttemptSummary>> {
    crate::db::prepared::prepared(
        "SELECT run, attempt, node_id, started_at, ended_at, outcome, error_code, error_message
           FROM job_attempts WHERE job_id = $1 ORDER BY started_at, id",
    )
    .bind::<diesel::sql_types::BigInt, _>(id)
    .load(conn)
    .await
}
