//! The transactions of an encoding job's life after its claim: finalize READY or FAILED,
//! retry later, release on shutdown, reap a job that died in its last attempt, and the
//! operators' retry and cancel. Every write that depends on a claim is fenced on its token;
//! a fence that matches nothing rolls the whole transaction back.

use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::json;
use tracing::Instrument;
use uuid::Uuid;

use crate::db::{self, DbError, DbPool, jobs::AttemptEnd};
use crate::domain::event::Event;
use crate::domain::failure;
use crate::domain::ids::VideoId;
use crate::domain::job::{JobKind, JobStatus, MAX_ATTEMPTS, Outcome};
use crate::domain::media::MediaError;
use crate::domain::recording::RecordingState;
use crate::domain::video::VideoStatus;
use crate::pipeline::{AttemptOutput, AttemptPlan};

/// How long a retried job waits before it can be claimed again (the seed's 5 s).
pub const RETRY_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// A worker's hold on a job.
#[derive(Clone, Debug)]
pub struct Claim {
    /// Job id.
    pub job_id: i64,
    /// Its video.
    pub video: VideoId,
    /// The fencing token.
    pub token: Uuid,
    /// The run (1, then one more per operator retry); names the keys with the attempt.
    pub run: i32,
    /// This attempt's number within its run.
    pub attempt: i32,
    /// Where the original is.
    pub original_key: String,
    /// What the attempt does.
    pub kind: JobKind,
    /// Time to READY so far: the wait from enqueueing (the confirm, or an operator's retry)
    /// to the claim by the database's clock, plus this node's monotonic time since the
    /// claim; no two clocks are ever subtracted.
    pub waited: TimeSince,
}

/// A wait measured partly by the database (until the claim) and then by this process.
#[derive(Clone, Copy, Debug)]
pub struct TimeSince {
    before_claim: std::time::Duration,
    claimed: std::time::Instant,
}

impl TimeSince {
    /// The whole wait until now.
    pub fn until_now(&self) -> std::time::Duration {
        self.before_claim + self.claimed.elapsed()
    }
}

impl From<db::jobs::ClaimedJob> for Claim {
    fn from(job: db::jobs::ClaimedJob) -> Self {
        Self {
            job_id: job.id,
            video: VideoId(job.video_id),
            token: job.claim_token,
            run: job.run,
            attempt: job.attempt_count,
            original_key: job.original_s3_key,
            // The schema's CHECK allows these two spellings only.
            kind: job.kind.parse().unwrap_or(JobKind::Encode),
            waited: TimeSince {
                before_claim: std::time::Duration::try_from_secs_f64(job.queued_secs)
                    .unwrap_or_default(),
                claimed: std::time::Instant::now(),
            },
        }
    }
}

impl Claim {
    /// What the claimed attempt works on.
    pub fn plan(&self) -> AttemptPlan {
        AttemptPlan {
            video: self.video,
            run: self.run,
            attempt: self.attempt,
            original_key: self.original_key.clone(),
            kind: self.kind,
            claim_token: self.token,
        }
    }
}

/// Why a claim-dependent transaction changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The claim is no longer ours (lease expired and reclaimed, cancelled, video deleted):
    /// the transaction was rolled back whole.
    #[error("the claim was lost; nothing was written")]
    ClaimLost,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
    /// The task running the transaction ended without an answer (it panicked): whether it
    /// committed is unknown, and the lease decides.
    #[error("the transaction's task ended without an answer")]
    Unanswered,
}

impl From<diesel::result::Error> for JobError {
    fn from(err: diesel::result::Error) -> Self {
        Self::Database(DbError::Query(err))
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for JobError {
    fn from(err: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        Self::Database(DbError::Pool(err))
    }
}

/// Takes the uploader's lock (`FOR KEY SHARE`: it blocks the user's deletion but not the
/// user's other finalizations), the first lock of every path. `ClaimLost` if the video or its
/// owner is gone.
async fn lock_owner(conn: &AsyncPgConnection, video: VideoId) -> Result<Uuid, JobError> {
    db::users::lock_owner_of_video(conn, video.0)
        .await?
        .ok_or(JobError::ClaimLost)
}

/// Fails with [`JobError::ClaimLost`] (rolling back) when the fence matched nothing.
pub(crate) fn fenced(rows: usize) -> Result<(), JobError> {
    if rows == 0 {
        Err(JobError::ClaimLost)
    } else {
        Ok(())
    }
}

/// A video row that vanished under a finalize (deleted with its video) is a lost claim.
fn video_gone(err: diesel::result::Error) -> JobError {
    match err {
        diesel::result::Error::NotFound => JobError::ClaimLost,
        other => other.into(),
    }
}

/// How an attempt ended, with the error's code and its public message (the log has the rest).
fn end<'a>(outcome: Outcome, error: Option<(&'a str, &'a str)>) -> AttemptEnd<'a> {
    AttemptEnd { outcome, error }
}

/// How many times a finalize transaction is tried when the database fails in a way that
/// passes (a broken connection, a serialization failure, a deadlock). After that the result
/// is left to the lease: the job is reclaimed and encoded again.
const FINALIZE_TRIES: u32 = 4;

/// Wait before the second try; doubled before each further one (100 + 200 + 400 ms in all,
/// well inside a lease).
const FINALIZE_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether `err` is a database failure that a new try of the same transaction, on a fresh
/// connection if need be, can get past.
pub(crate) fn is_transient(err: &JobError) -> bool {
    use diesel::result::{DatabaseErrorKind as Kind, Error};
    use diesel_async::pooled_connection::PoolError;
    match err {
        JobError::Database(DbError::Query(query)) if db::connection_lost(query) => true,
        JobError::Database(DbError::Query(query)) => match query {
            Error::DatabaseError(Kind::SerializationFailure, _)
            | Error::RollbackErrorOnCommit { .. } => true,
            // diesel names no kind for 40P01; PostgreSQL's message is stable.
            Error::DatabaseError(Kind::Unknown, info) => {
                info.message().starts_with("deadlock detected")
            }
            _ => false,
        },
        // A new connection could not be opened (the server restarting); a checkout that
        // timed out already waited 10 s and is not retried.
        JobError::Database(DbError::Pool(bb8::RunError::User(PoolError::ConnectionError(_)))) => {
            true
        }
        _ => false,
    }
}

/// Whether `err` says the database was out of reach, not that the transaction conflicted.
fn unavailable(err: &JobError) -> bool {
    matches!(err, JobError::Database(db) if db.is_unavailable())
}

/// Runs the fenced transaction `once` up to [`FINALIZE_TRIES`] times while it fails
/// transiently, and for as long as [`db::retrying::PATIENCE`] while the database is out of
/// reach. Each try is the whole transaction again, fence included, so a try after the
/// lease ran out matches nothing and rolls back like any late result. A try whose COMMIT got
/// no reply may have committed: when the next try then finds the claim gone, the attempt's
/// own row says whether it ended with `outcome`, which is then success.
///
/// `first` is how the first try went: the caller makes that try itself, because a READY
/// finalize's first try also carries its slot's next claim, and the tries after it go alone.
async fn retry_transient<F, Fut>(
    pool: &DbPool,
    claim: &Claim,
    outcome: Outcome,
    first: FirstTry,
    mut once: F,
) -> Result<(), JobError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), JobError>>,
{
    let mut backoff = FINALIZE_BACKOFF;
    let started = std::time::Instant::now();
    let mut tries = 1;
    let mut first = Some(first);
    loop {
        let answer = match first.take() {
            Some(FirstTry::Answered(answer)) => answer,
            Some(FirstTry::FailedInBatch) => {
                // The batch's failure is this transaction's first: wait as after any
                // transient failure, and count the next try as a second one.
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                tries += 1;
                once().await
            }
            None => once().await,
        };
        match answer {
            Err(JobError::ClaimLost) if tries > 1 => {
                let mut conn = pool.get().await?;
                return if db::attempts::ended_with(&mut conn, claim.job_id, claim.token, outcome)
                    .await?
                {
                    tracing::info!("an earlier try had committed");
                    Ok(())
                } else {
                    Err(JobError::ClaimLost)
                };
            }
            // A conflict gets a few tries; a database out of reach (a restart, a failover)
            // is waited for, up to the patience of any statement that may run again.
            Err(err)
                if is_transient(&err)
                    && (tries < FINALIZE_TRIES
                        || (unavailable(&err)
                            && started.elapsed() + backoff < db::retrying::PATIENCE)) =>
            {
                tracing::warn!(error = %crate::telemetry::error_chain(&err), tries,
                    "finalize failed on a transient database error; trying again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(2));
                tries += 1;
            }
            result => return result,
        }
    }
}

/// How the first try of a fenced transaction went (see [`retry_transient`]).
enum FirstTry {
    /// The caller made it, and this is its answer.
    Answered(Result<(), JobError>),
    /// It was part of a batch of finalizes (`super::ready_batch`) that failed on a transient
    /// error, so it may have committed.
    FailedInBatch,
}

/// READY, in one transaction: lock the uploader, update (and so lock) the video with its
/// facts and live keys, insert `video.ready`, and as the LAST statement the fenced COMPLETED
/// update (which also closes the attempt). A fence that matches nothing rolls it all back;
/// a transient database failure runs the whole transaction again (at most 4 tries).
pub async fn finalize_ready(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
) -> Result<(), JobError> {
    finalize_ready_then_claim(pool, claim, output, None).await.0
}

/// Who claims the next job when a finalize carries one ([`finalize_ready_then_claim`]).
#[derive(Clone, Copy, Debug)]
pub struct NextClaim<'a> {
    /// Written to `claimed_by`.
    pub node: &'a str,
    /// The new claim's lease.
    pub lease: std::time::Duration,
}

/// What the claim a finalize carried found: `None` if none went out, else the claim's answer
/// (a job, or `None` when nothing was claimable).
pub type CarriedClaim = Option<Result<Option<Claim>, JobError>>;

/// [`finalize_ready`], with `next`'s claim of the freed slot's next job sent right behind the
/// `COMMIT`, in the same round trip: a busy worker then makes one round trip per job
/// instead of two. The claim is its own autocommitted statement (the seed's claim, unchanged),
/// run after the finalize's transaction has ended whichever way it ended, so a lost fence
/// loses nothing but the result it guarded. Returns the finalize's answer and the claim's:
/// `None` if no claim went out (`next` is `None`, no connection, or a recording's first batch
/// failed). Only the first try carries the claim; the tries after a transient failure go
/// alone.
#[tracing::instrument(name = "finalize_ready", skip_all, fields(job_id = claim.job_id, video_id = %claim.video, run = claim.run, attempt = claim.attempt))]
pub async fn finalize_ready_then_claim(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    next: Option<NextClaim<'_>>,
) -> (Result<(), JobError>, CarriedClaim) {
    let (first, claimed) = finalize_ready_once(pool, claim, output, next).await;
    let finalized = retry_transient(
        pool,
        claim,
        Outcome::Completed,
        FirstTry::Answered(first),
        || async { finalize_ready_once(pool, claim, output, None).await.0 },
    )
    .await;
    (finalized, claimed)
}

/// The READY finalize of `claim` alone, after a batch of finalizes it was part of
/// (`super::ready_batch`) failed on a transient database error. That batch may have
/// committed, so its try counts as this finalize's first: a fence that then matches nothing
/// asks the job row whether the attempt completed, as any try after the first does.
pub async fn finalize_ready_after_failed_batch(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
) -> Result<(), JobError> {
    retry_transient(
        pool,
        claim,
        Outcome::Completed,
        FirstTry::FailedInBatch,
        || async { finalize_ready_once(pool, claim, output, None).await.0 },
    )
    .await
}

/// Where the answer of a claim sent ahead of a finalize goes, as soon as it has one.
pub type ClaimAnswer = tokio::sync::oneshot::Sender<Result<Option<Claim>, JobError>>;

/// A READY finalize that the claim of its slot's next job went ahead of
/// ([`claim_ahead_of_finalize_ready`]).
pub struct ClaimedAhead {
    /// The claim's answer (`None` if it got none: no connection could be had, or the task
    /// ended first).
    pub claimed: CarriedClaim,
    /// The finalize with all its tries, on a task of its own.
    pub finalized: tokio::task::JoinHandle<Result<(), JobError>>,
}

/// [`finalize_ready`], with `next`'s claim of the freed slot's next job sent AHEAD of the
/// transaction in the same flight, and answered as soon as the claim is: the slot starts its
/// next job while the finalize's statements run and its `COMMIT` waits for the WAL flush,
/// instead of after. The finalize goes on (all its tries) on a task of its own, whose answer
/// is [`ClaimedAhead::finalized`].
pub async fn claim_ahead_of_finalize_ready(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    node: &str,
    lease: std::time::Duration,
) -> ClaimedAhead {
    let (answer, claimed) = tokio::sync::oneshot::channel();
    let (pool, claim, output, node) =
        (pool.clone(), claim.clone(), output.clone(), node.to_owned());
    let finalized = tokio::spawn(
        async move {
            let next = NextClaim { node: &node, lease };
            finalize_ready_claiming_ahead(&pool, &claim, &output, next, answer).await
        }
        .in_current_span(),
    );
    ClaimedAhead {
        claimed: claimed.await.ok(),
        finalized,
    }
}

/// [`finalize_ready`] (all its tries), its first try with `next`'s claim sent ahead of the
/// transaction in the same flight and answered on `answer` as soon as it is. `answer` is
/// dropped unanswered when no claim went out.
///
/// The claim is the seed's autocommitted statement, unchanged, and the finalize's
/// transaction is the same as without it (the COMPLETED update last, a fence that matches
/// nothing rolls it all back); only their order on the wire changes. The claim does not depend
/// on the finalize: it takes a job whether or not the fence holds, as it did behind the
/// `COMMIT`. A recording's video, whose finalize takes two round trips, sends its claim
/// behind the `COMMIT` as before, and `answer` hears once the transaction has ended.
pub async fn finalize_ready_claiming_ahead(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    next: NextClaim<'_>,
    answer: ClaimAnswer,
) -> Result<(), JobError> {
    let first = if claim.kind == JobKind::Repackage {
        let (first, claimed) = finalize_ready_once(pool, claim, output, Some(next)).await;
        if let Some(claimed) = claimed {
            hand_over(pool, answer, claimed).await;
        }
        first
    } else {
        let (first, orphan) =
            finalize_ready_once_claiming_ahead(pool, claim, output, next, answer).await;
        if let Some(orphan) = orphan {
            release_orphan(pool, &orphan).await;
        }
        first
    };
    retry_transient(
        pool,
        claim,
        Outcome::Completed,
        FirstTry::Answered(first),
        || async { finalize_ready_once(pool, claim, output, None).await.0 },
    )
    .await
}

/// Answers a claim sent ahead; a job claimed for a slot that is no longer listening (its task
/// ended at shutdown) is handed back at once rather than left to its lease.
async fn hand_over(pool: &DbPool, answer: ClaimAnswer, claimed: Result<Option<Claim>, JobError>) {
    if let Err(Ok(Some(orphan))) = answer.send(claimed) {
        release_orphan(pool, &orphan).await;
    }
}

/// Hands back a job claimed for a slot that is gone.
pub(crate) async fn release_orphan(pool: &DbPool, orphan: &Claim) {
    if let Err(error) = release(pool, orphan).await {
        tracing::warn!(job_id = orphan.job_id,
            error = %crate::telemetry::error_chain(&error),
            "could not hand back a job claimed for a slot that is gone; its lease will expire");
    }
}

/// The statements of the READY transaction of a video that is not a recording, issued on `c`
/// together so that they go out in one flight: the uploader's lock, the video, its event and,
/// as the LAST statement, the fenced completion. The event's time and owner are read from the
/// updated video row by the database, so nothing waits for an answer before the `COMMIT` is
/// sent. The only statements that can fail in the client alone (the video or its owner gone)
/// are those of a video whose job went with it, so the fence fails on the server too.
async fn ready_statements(
    c: &AsyncPgConnection,
    claim: &Claim,
    output: &AttemptOutput,
) -> Result<(), JobError> {
    let facts = ready_facts(claim, output);
    let event = Event::video_ready(
        claim.video,
        claim.run,
        chrono::Utc::now(), // replaced by the video's updated_at (insert_stamped)
        ready_data(output, None),
    );
    futures_util::try_join!(
        lock_and_set_ready(c, claim, &facts),
        event_and_fence(c, claim, &event)
    )
    .map(drop)
}

/// The first statements of a READY finalize: the uploader's lock, then the video's facts.
async fn lock_and_set_ready(
    c: &AsyncPgConnection,
    claim: &Claim,
    facts: &db::videos::ReadyFacts<'_>,
) -> Result<(), JobError> {
    futures_util::try_join!(lock_owner(c, claim.video), async {
        db::videos::set_ready(c, claim.video.0, facts)
            .await
            .map_err(video_gone)
    })
    .map(drop)
}

/// The last statements of a READY finalize: its event, and as the LAST statement the fenced
/// completion (which also closes the attempt).
async fn event_and_fence(
    c: &AsyncPgConnection,
    claim: &Claim,
    event: &Event,
) -> Result<(), JobError> {
    let (_, completed) = futures_util::try_join!(
        db::outbox::insert_stamped(c, event),
        db::jobs::complete(c, claim.job_id, claim.token, end(Outcome::Completed, None)),
    )?;
    fenced(completed)
}

/// `next`'s claim, answered on `answer` as soon as it is, and behind it the whole READY
/// transaction of `claim` (not a recording), all sent in one flight. Returns the
/// transaction's answer, and the job claimed if nobody was listening for it any more.
async fn finalize_ready_once_claiming_ahead(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    next: NextClaim<'_>,
    answer: ClaimAnswer,
) -> (Result<(), JobError>, Option<Claim>) {
    // Without a connection no claim went out: `answer` is dropped unanswered.
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(error) => return (Err(error.into()), None),
    };
    let tx = db::pipeline::Pipeline::new(&mut conn);
    let c = tx.conn();
    // Polled first, so sent first: the claim is on the wire before the BEGIN.
    let claimed = async {
        let claimed = db::jobs::claim(c, next.node, next.lease.as_secs_f64())
            .await
            .map(|job| job.map(Claim::from))
            .map_err(JobError::from);
        answer
            .send(claimed)
            .err()
            .and_then(|unheard| unheard.ok().flatten())
    };
    let (orphan, finalized) =
        futures_util::future::join(claimed, tx.run(ready_statements(c, claim, output))).await;
    (finalized, orphan)
}

/// One try of the READY transaction, and `next`'s claim behind its `COMMIT` (the claim's
/// answer is `None` when `next` is).
async fn finalize_ready_once(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    next: Option<NextClaim<'_>>,
) -> (Result<(), JobError>, CarriedClaim) {
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(error) => return (Err(error.into()), None),
    };
    let tx = db::pipeline::Pipeline::new(&mut conn);
    let c = tx.conn();
    // Sent behind the COMMIT when there is a next claim to make; nothing otherwise.
    let next_claim = || async move {
        match next {
            Some(next) => Some(
                db::jobs::claim(c, next.node, next.lease.as_secs_f64())
                    .await
                    .map(|job| job.map(Claim::from))
                    .map_err(JobError::from),
            ),
            None => None,
        }
    };
    if claim.kind != JobKind::Repackage {
        // One round trip.
        return tx
            .run_then(ready_statements(c, claim, output), next_claim())
            .await;
    }
    // A recording's video: its event counts the segments kept, read in this transaction, so
    // this takes two round trips.
    let facts = ready_facts(claim, output);
    let began = tx
        .begin_with(async {
            let live = async {
                let followed =
                    db::live_videos::follow_video(c, claim.video.0, RecordingState::Ready);
                let segments = db::live_videos::segments_of_video(c, claim.video.0);
                let (followed, segments) = futures_util::try_join!(followed, segments)?;
                Ok::<_, JobError>((followed > 0).then_some(segments))
            };
            futures_util::try_join!(lock_and_set_ready(c, claim, &facts), live)
        })
        .await;
    let live = match began {
        Ok((_, live)) => live,
        Err(error) => return (Err(error), None),
    };
    let event = Event::video_ready(
        claim.video,
        claim.run,
        chrono::Utc::now(), // replaced by the video's updated_at (insert_stamped)
        ready_data(output, live),
    );
    tx.commit_with_then(event_and_fence(c, claim, &event), next_claim())
        .await
}

/// What a READY finalize writes on the video: the probe's facts and `claim`'s live keys.
pub(crate) fn ready_facts<'a>(
    claim: &Claim,
    output: &'a AttemptOutput,
) -> db::videos::ReadyFacts<'a> {
    let media = &output.media;
    db::videos::ReadyFacts {
        duration_ms: media.duration_ms,
        width: media.width,
        height: media.height,
        video_codec: &media.video_codec,
        audio_codec: media.audio_codec.as_deref(),
        live_run: claim.run,
        live_attempt: claim.attempt,
        hls_key: &output.keys.hls,
        mp4_key: &output.keys.mp4,
        thumbnail_key: &output.keys.thumbnail,
    }
}

/// The `data` of `video.ready`: the probe's facts and the playback keys, and for a video made
/// from a recording (`live`: its kept and excluded segments) where it came from.
pub(crate) fn ready_data(output: &AttemptOutput, live: Option<(i64, i64)>) -> serde_json::Value {
    let media = &output.media;
    let mut data = json!({
        "status": VideoStatus::Ready.as_str(),
        "duration_ms": media.duration_ms,
        "width": media.width,
        "height": media.height,
        "source": "upload",
        "playback": {
            "hls_key": output.keys.hls,
            "mp4_key": output.keys.mp4,
            "thumbnail_key": output.keys.thumbnail,
        },
    });
    if let Some((kept, excluded)) = live {
        data["source"] = "live".into();
        data["segments"] = json!({ "kept": kept, "excluded": excluded });
    }
    data
}

/// FAILED, in one transaction shaped like [`finalize_ready`]: the error on the video,
/// `video.failed`, the fenced COMPLETED update last, tried again like it. The video, its event
/// and the attempt get the code and its public message only; the detail (tool and scratch
/// paths, stderr) is the log's.
#[tracing::instrument(skip_all, fields(job_id = claim.job_id, video_id = %claim.video, run = claim.run, attempt = claim.attempt))]
pub async fn finalize_failed(
    pool: &DbPool,
    claim: &Claim,
    error: &MediaError,
) -> Result<(), JobError> {
    let first = finalize_failed_once(pool, claim, error).await;
    retry_transient(
        pool,
        claim,
        Outcome::Failed,
        FirstTry::Answered(first),
        || finalize_failed_once(pool, claim, error),
    )
    .await
}

async fn finalize_failed_once(
    pool: &DbPool,
    claim: &Claim,
    error: &MediaError,
) -> Result<(), JobError> {
    let message = error.public_message();
    let mut conn = pool.get().await?;
    let tx = db::pipeline::Pipeline::new(&mut conn);
    let c = tx.conn();
    // One round trip, like the READY finalize of an upload.
    let event = Event::video_failed(
        claim.video,
        claim.run,
        chrono::Utc::now(), // replaced by the video's updated_at (insert_stamped)
        error.code,
        &message,
    );
    let ended = end(Outcome::Failed, Some((error.code, &message)));
    tx.run(async {
        let (_, _, _, _, completed) = futures_util::try_join!(
            lock_owner(c, claim.video),
            async {
                db::videos::set_failed(c, claim.video.0, error.code, &message)
                    .await
                    .map_err(video_gone)
            },
            async {
                db::live_videos::follow_video(c, claim.video.0, RecordingState::Failed)
                    .await
                    .map_err(JobError::from)
            },
            async {
                db::outbox::insert_stamped(c, &event)
                    .await
                    .map_err(JobError::from)
            },
            async {
                db::jobs::complete(c, claim.job_id, claim.token, ended)
                    .await
                    .map_err(JobError::from)
            },
        )?;
        fenced(completed)
    })
    .await
}

/// A failed attempt: permanent errors and the last attempt's error fail the video; otherwise
/// the job goes back to PENDING after `delay` (fenced). Returns whether it will be retried.
pub async fn fail_or_retry(
    pool: &DbPool,
    claim: &Claim,
    error: &MediaError,
    delay: std::time::Duration,
) -> Result<bool, JobError> {
    if error.is_permanent() || claim.attempt >= MAX_ATTEMPTS {
        return finalize_failed(pool, claim, error).await.map(|()| false);
    }
    let message = error.public_message();
    let mut conn = pool.get().await?;
    conn.transaction::<_, JobError, _>(async |conn| {
        let ended = end(Outcome::Retry, Some((error.code, &message)));
        fenced(
            db::jobs::retry_later(conn, claim.job_id, claim.token, ended, delay.as_secs_f64())
                .await?,
        )?;
        db::jobs::notify_claimable(conn).await?;
        Ok(true)
    })
    .await
}

/// Graceful release on shutdown: back to PENDING with the attempt given back (fenced).
pub async fn release(pool: &DbPool, claim: &Claim) -> Result<(), JobError> {
    let mut conn = pool.get().await?;
    conn.transaction::<_, JobError, _>(async |conn| {
        fenced(
            db::jobs::release(
                conn,
                claim.job_id,
                claim.token,
                end(Outcome::Released, None),
            )
            .await?,
        )?;
        db::jobs::notify_claimable(conn).await?;
        Ok(())
    })
    .await
}

/// Records that this node lost its claim (best effort; the next claim also logs it).
pub async fn record_lost(pool: &DbPool, claim: &Claim, reason: &str) -> Result<(), JobError> {
    let mut conn = pool.get().await?;
    db::attempts::log_lost(&mut conn, claim.job_id, claim.token, "claim_lost", reason).await?;
    Ok(())
}

/// Closes jobs that died in their last attempt: DEAD (closed), the video FAILED and one
/// `video.failed`, in one transaction each. Any worker runs this on its tick; the fence
/// makes two reapers harmless. Returns how many it closed.
pub async fn reap_dead(pool: &DbPool) -> Result<usize, JobError> {
    let mut conn = pool.get().await?;
    let candidates = db::jobs::dead_candidates(&mut conn, 16).await?;
    let mut reaped = 0;
    for job in candidates {
        let closed = conn
            .transaction::<_, JobError, _>(async |conn| {
                let video = VideoId(job.video_id);
                let owner = lock_owner(conn, video).await?;
                let code = "attempts_exhausted";
                let message = failure::sentence(code);
                let at = db::videos::set_failed(conn, video.0, code, message)
                    .await
                    .map_err(video_gone)?;
                db::live_videos::follow_video(conn, video.0, RecordingState::Failed).await?;
                let event = Event::video_failed(video, job.run, at, code, message);
                db::outbox::insert(conn, owner, &event).await?;
                let ended = AttemptEnd {
                    outcome: Outcome::Dead,
                    error: Some(("lease_expired", message)),
                };
                fenced(db::jobs::mark_dead(conn, job.id, job.claim_token, ended).await?)
            })
            .await;
        match closed {
            Ok(()) => {
                reaped += 1;
                tracing::warn!(job_id = job.id, video_id = %job.video_id, "job died in its last attempt; video failed");
            }
            Err(JobError::ClaimLost) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(reaped)
}

/// Why an operator's retry or cancel was refused.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// No such job.
    #[error("no job {0}")]
    NotFound(i64),
    /// The job is in a state the command does not apply to.
    #[error("job {id} is {status} (video {video_status}); {hint}")]
    WrongState {
        /// Job id.
        id: i64,
        /// Its status.
        status: JobStatus,
        /// Its video's status.
        video_status: VideoStatus,
        /// What the command needs.
        hint: &'static str,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] JobError),
}

impl From<diesel::result::Error> for OperatorError {
    fn from(err: diesel::result::Error) -> Self {
        Self::Database(err.into())
    }
}

/// What an operator asks of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperatorAction {
    /// `vidq jobs retry`: a DEAD job, or the job of a FAILED video, back to PENDING as a new
    /// run with a fresh attempt budget; its video goes back to `queued`. The new run writes
    /// under its own keys; the worker that makes it READY deletes the earlier runs' objects.
    Retry,
    /// `vidq jobs cancel`: a PENDING or PROCESSING job is closed and its video FAILED
    /// (`cancelled`) with one `video.failed`. A worker running it loses its claim at its next
    /// heartbeat and kills its FFmpeg.
    Cancel,
}

/// Applies an operator's retry or cancel in one transaction, locks in the usual order, the
/// job's change a compare-and-set on the status it was seen in.
pub async fn operator(pool: &DbPool, id: i64, action: OperatorAction) -> Result<(), OperatorError> {
    let mut conn = pool.get().await.map_err(JobError::from)?;
    conn.transaction::<_, OperatorError, _>(async |conn| {
        let job = db::jobs::find(conn, id)
            .await?
            .ok_or(OperatorError::NotFound(id))?;
        let video = VideoId(job.video_id);
        let owner = match lock_owner(conn, video).await {
            Ok(owner) => owner,
            Err(JobError::ClaimLost) => return Err(OperatorError::NotFound(id)),
            Err(err) => return Err(err.into()),
        };
        db::videos::lock_for_update(conn, video.0).await?;
        // A live recording's row follows its video below: locked now, before the job (lock
        // order).
        db::live_videos::lock_recording_of(conn, video.0).await?;
        let (status, run) = db::jobs::lock_status(conn, id)
            .await?
            .ok_or(OperatorError::NotFound(id))?;
        let status: JobStatus = status
            .parse()
            .map_err(|e| JobError::from(DbError::from(e)))?;
        let video_status: VideoStatus = job
            .video_status
            .parse()
            .map_err(|e| JobError::from(DbError::from(e)))?;
        let wrong = |hint| OperatorError::WrongState {
            id,
            status,
            video_status,
            hint,
        };
        let changed = match action {
            OperatorAction::Retry => {
                let retryable = status == JobStatus::Dead
                    || (status == JobStatus::Completed && video_status == VideoStatus::Failed);
                if !retryable {
                    return Err(wrong(
                        "only a DEAD job or the job of a failed video can be retried",
                    ));
                }
                db::videos::requeue(conn, video.0).await?;
                db::live_videos::follow_video(conn, video.0, RecordingState::Ended).await?;
                let changed = db::jobs::requeue(conn, id, status.as_str()).await?;
                db::jobs::notify_claimable(conn).await?;
                changed
            }
            OperatorAction::Cancel => {
                if !matches!(status, JobStatus::Pending | JobStatus::Processing) {
                    return Err(wrong("only a PENDING or PROCESSING job can be cancelled"));
                }
                let code = "cancelled";
                let message = failure::sentence(code);
                let at = db::videos::set_failed(conn, video.0, code, message).await?;
                db::live_videos::follow_video(conn, video.0, RecordingState::Failed).await?;
                let event = Event::video_failed(video, run, at, code, message);
                db::outbox::insert(conn, owner, &event).await?;
                db::jobs::cancel(conn, id, status.as_str()).await?
            }
        };
        if changed == 0 {
            return Err(JobError::ClaimLost.into());
        }
        Ok(())
    })
    .await
}

#[cfg(test)]
mod tests {
    use diesel::result::{DatabaseErrorKind as Kind, Error};

    use super::*;

    fn failed(kind: Kind, message: &str) -> JobError {
        JobError::Database(DbError::Query(Error::DatabaseError(
            kind,
            Box::new(message.to_owned()),
        )))
    }

    #[test]
    fn only_failures_that_pass_are_tried_again() {
        for passing in [
            failed(Kind::SerializationFailure, "could not serialize access"),
            failed(Kind::Unknown, "deadlock detected"),
            failed(
                Kind::Unknown,
                "terminating connection due to administrator command",
            ),
            failed(Kind::UnableToSendCommand, "connection closed"),
            failed(Kind::ClosedConnection, "server closed the connection"),
        ] {
            assert!(is_transient(&passing), "{passing:?}");
        }
        for lasting in [
            failed(Kind::UniqueViolation, "duplicate key value"),
            failed(Kind::CheckViolation, "attempt_count"),
            failed(Kind::Unknown, "relation \"videos\" does not exist"),
            JobError::ClaimLost,
        ] {
            assert!(!is_transient(&lasting), "{lasting:?}");
        }
    }
}
