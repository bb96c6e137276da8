//! The artifact ledger: a row per output object, `pending` before its PUT, `uploaded` after a
//! compare-and-set on state and size.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::video_artifacts;
use crate::domain::artifact::ArtifactState;
use crate::domain::ids::{ClaimToken, VideoId};
use crate::domain::job::JobStatus;

/// A `video_artifacts` row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = video_artifacts)]
pub struct ArtifactRow {
    /// Primary key.
    pub id: i64,
    /// Owning video.
    pub video_id: Uuid,
    /// Attempt whose prefix holds it.
    pub attempt: i32,
    /// See [`Axis`](crate::domain::artifact::Axis).
    pub axis: crate::domain::artifact::Axis,
    /// Order within the axis (segment number).
    pub sequence: i32,
    /// S3 key.
    pub object_key: String,
    /// Expected size.
    pub size_bytes: i64,
    /// `pending | uploaded`.
    pub state: crate::domain::artifact::ArtifactState,
    /// Registered.
    pub created_at: DateTime<Utc>,
    /// Confirmed in S3.
    pub uploaded_at: Option<DateTime<Utc>>,
    /// Run whose prefix holds it.
    pub run: i32,
    /// The part of a split video whose attempt wrote it (`None`: the video's own job).
    pub part: Option<i32>,
}

/// An object about to be uploaded.
#[derive(Debug, Insertable)]
#[diesel(table_name = video_artifacts)]
pub struct NewArtifact<'a> {
    /// Owning video.
    pub video_id: Uuid,
    /// Run.
    pub run: i32,
    /// Attempt.
    pub attempt: i32,
    /// Axis.
    pub axis: &'a str,
    /// Order within the axis.
    pub sequence: i32,
    /// S3 key.
    pub object_key: &'a str,
    /// Size of the local file.
    pub size_bytes: i64,
    /// The part of a split video whose attempt writes it (`None`: the video's own job).
    pub part: Option<i32>,
}

/// Registers one attempt's objects as `pending` before any PUT, in place of whatever that
/// attempt registered before. The same (run, attempt) is only registered twice after a
/// graceful release, and the node that takes it over may make another set of outputs (another
/// ladder, or keys of another layout after an upgrade): its objects are about to be
/// overwritten, so the old rows are dropped rather than merged, and no `(axis, sequence)` of
/// the old set can collide with the new one.
///
/// Fenced on the attempt's claim: `None` (nothing registered) when no job of these videos is
/// PROCESSING under `claim_token`. This is the first write of an encoding attempt, and it
/// commits synchronously, so once it has registered anything the claim (committed without
/// its WAL flush, `super::jobs::CLAIM_SQL`) is durable too.
pub async fn register_pending(
    conn: &mut AsyncPgConnection,
    claim_token: ClaimToken,
    rows: &[NewArtifact<'_>],
) -> QueryResult<Option<usize>> {
    use super::schema::video_encoding_jobs as jobs;
    use diesel::upsert::excluded;
    conn.transaction(async |conn| {
        let mut attempts: Vec<(Uuid, i32, i32, Option<i32>)> = rows
            .iter()
            .map(|r| (r.video_id, r.run, r.attempt, r.part))
            .collect();
        attempts.sort_unstable();
        attempts.dedup();
        // The video row first (lock order, `db`): a video deletion locks it `FOR UPDATE` and
        // then cascades to these rows, so taking the artifact rows first could deadlock.
        let mut owners: Vec<Uuid> = attempts.iter().map(|(video, ..)| *video).collect();
        owners.dedup();
        super::schema::videos::table
            .filter(super::schema::videos::id.eq_any(&owners))
            .select(super::schema::videos::id)
            .order(super::schema::videos::id)
            .for_key_share()
            .load::<Uuid>(conn)
            .await?;
        let held: i64 = jobs::table
            .filter(jobs::video_id.eq_any(&owners))
            .filter(jobs::claim_token.eq(claim_token))
            .filter(jobs::status.eq(JobStatus::Processing.as_str()))
            .count()
            .get_result(conn)
            .await?;
        if held == 0 {
            return Ok(None);
        }
        for (video, run, attempt, part) in attempts {
            diesel::delete(
                video_artifacts::table.filter(
                    video_artifacts::video_id
                        .eq(video)
                        .and(video_artifacts::run.eq(run))
                        .and(video_artifacts::attempt.eq(attempt))
                        .and(video_artifacts::part.is_not_distinct_from(part)),
                ),
            )
            .execute(conn)
            .await?;
        }
        diesel::insert_into(video_artifacts::table)
            .values(rows)
            .on_conflict(video_artifacts::object_key)
            .do_update()
            .set((
                video_artifacts::size_bytes.eq(excluded(video_artifacts::size_bytes)),
                video_artifacts::state.eq(ArtifactState::Pending.as_str()),
                video_artifacts::uploaded_at.eq(None::<DateTime<Utc>>),
            ))
            .execute(conn)
            .await
            .map(Some)
    })
    .await
}

/// Forgets every artifact of a video except those of its live (run, attempt), in the READY
/// transaction that owes their objects to the bucket: the ledger then never names an object
/// that may be gone.
pub async fn forget_superseded(
    mut conn: &AsyncPgConnection,
    video: VideoId,
    live_run: i32,
    live_attempt: i32,
) -> QueryResult<usize> {
    // A split video's parts are intermediates: once READY, every part's rows go too.
    diesel::delete(
        video_artifacts::table.filter(
            video_artifacts::video_id.eq(video).and(
                video_artifacts::run
                    .ne(live_run)
                    .or(video_artifacts::attempt.ne(live_attempt))
                    .or(video_artifacts::part.is_not_null()),
            ),
        ),
    )
    .execute(&mut conn)
    .await
}

/// Forgets every part's rows of `video`'s `run`, in the transaction that ends the run's
/// split (a failure, a cancel, a fallback to the whole encode) and owes the bucket their
/// prefix: the ledger then never names an object that may be gone.
pub async fn forget_parts(
    mut conn: &AsyncPgConnection,
    video: VideoId,
    run: i32,
) -> QueryResult<usize> {
    diesel::delete(
        video_artifacts::table.filter(
            video_artifacts::video_id
                .eq(video)
                .and(video_artifacts::run.eq(run))
                .and(video_artifacts::part.is_not_null()),
        ),
    )
    .execute(&mut conn)
    .await
}

/// CAS `pending -> uploaded`, only if the size S3 reports is the size registered. A row
/// already `uploaded` with that size counts too: the same confirm again, after its answer
/// was lost with the connection. Zero rows means the ledger disagrees (another size, or
/// the video is gone).
pub async fn mark_uploaded(
    conn: &mut AsyncPgConnection,
    key: &str,
    size: i64,
) -> QueryResult<usize> {
    use diesel::sql_types::{BigInt, Text};
    // Hand-written so it is prepared once per connection: one runs per object PUT, and
    // diesel never caches an UPDATE it builds.
    super::prepared::prepared(format!(
        "UPDATE video_artifacts
            SET state = '{uploaded}',
                uploaded_at = CASE WHEN state = '{pending}' THEN clock_timestamp() ELSE uploaded_at END
          WHERE object_key = $1 AND state IN ('{pending}', '{uploaded}') AND size_bytes = $2",
        uploaded = ArtifactState::Uploaded.as_str(),
        pending = ArtifactState::Pending.as_str(),
    ))
    .bind::<Text, _>(key)
    .bind::<BigInt, _>(size)
    .execute(conn)
    .await
}

/// Every artifact of one attempt of one run, in upload order.
pub async fn of_attempt(
    conn: &mut AsyncPgConnection,
    video: VideoId,
    run: i32,
    attempt: i32,
) -> QueryResult<Vec<ArtifactRow>> {
    video_artifacts::table
        .filter(
            video_artifacts::video_id
                .eq(video)
                .and(video_artifacts::run.eq(run))
                .and(video_artifacts::attempt.eq(attempt)),
        )
        .select(ArtifactRow::as_select())
        .order(video_artifacts::id)
        .load(conn)
        .await
}

/// Forgets the rows of objects an orphan pass deleted (a failed or superseded attempt's
/// outputs), so the ledger lists only objects that exist. One statement, artifact rows only.
pub async fn forget_keys(conn: &mut AsyncPgConnection, keys: &[String]) -> QueryResult<usize> {
    if keys.is_empty() {
        return Ok(0);
    }
    diesel::delete(video_artifacts::table.filter(video_artifacts::object_key.eq_any(keys)))
        .execute(conn)
        .await
}

/// Forgets `pending` rows older than `grace_secs` of attempts that are no longer running:
/// their job is not PROCESSING that (run, attempt) any more (the node died, the lease was
/// lost, the job finished another way). Their PUTs will never be confirmed; if an object
/// landed, the orphan pass deletes it with the other objects of that prefix. One
/// statement, artifact rows only (it reads the job, it locks nothing there).
pub async fn forget_dead_pending(
    conn: &mut AsyncPgConnection,
    grace_secs: f64,
) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "DELETE FROM video_artifacts a
          WHERE a.state = '{pending}'
            AND a.created_at < statement_timestamp() - make_interval(secs => $1)
            AND NOT EXISTS (
                SELECT 1 FROM video_encoding_jobs j
                 WHERE j.video_id = a.video_id AND j.status = '{processing}'
                   AND j.run = a.run AND j.attempt_count = a.attempt
                   AND j.part IS NOT DISTINCT FROM a.part)",
        pending = ArtifactState::Pending.as_str(),
        processing = crate::domain::job::JobStatus::Processing.as_str(),
    ))
    .bind::<diesel::sql_types::Double, _>(grace_secs)
    .execute(conn)
    .await
}
