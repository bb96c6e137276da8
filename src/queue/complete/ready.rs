//! The READY finalize, for one attempt or several that are ready together: which attempts
//! share a transaction, one try of each with whatever rides ahead of it in the flight, the
//! tries after a failure, and the one function that builds the READY transaction
//! ([`transaction`]).
//!
//! The transaction of a finalize: the uploaders' locks, the videos' facts, what the other
//! attempts left behind owed to the bucket, `video.ready`, and as the LAST statement the
//! fenced completion of every job. It keeps what the finalize of one attempt guarantees
//! (docs/architecture.md, Workers), however many share it:
//! - its statements take their locks in the lock order's tables (`crate::db`): every
//!   uploader first, in id order, then the videos, then the events (new rows), and the
//!   fenced COMPLETED update of every job last;
//! - each fence raises when it matches nothing, so one lost claim rolls the whole transaction
//!   back on the server, its `COMMIT` included; then each attempt of it is tried again on its
//!   own, where the lost one rolls back alone and the others commit;
//! - a transaction that failed on a transient error (a broken connection) may have
//!   committed, so each of its attempts is tried again as a second try, which asks the job
//!   row whether its attempt completed when its fence finds the claim gone.
//!
//! Several attempts share one transaction because on a busy queue most of a finalize's cost
//! is not its rows but what surrounds them: a transaction to start and commit, a WAL flush to
//! wait for, a round trip that wakes a task and a backend. A recording's video needs a read
//! before its event (two round trips), so its finalize goes alone.

use diesel_async::AsyncPgConnection;
use serde_json::json;

use super::retry::{FirstTry, retry_transient};
use crate::db::pipelined::PipelinedTx;
use crate::db::{self, DbPool};
use crate::domain::event::Event;
use crate::domain::job::{JobKind, Outcome};
use crate::domain::keys;
use crate::domain::recording::RecordingState;
use crate::domain::video::VideoStatus;
use crate::pipeline::AttemptOutput;
use crate::queue::error::{end, fenced, is_transient, lock_owner, video_gone};
use crate::queue::{Claim, JobError};

/// One finished attempt whose READY is to be recorded.
#[derive(Clone, Debug)]
pub struct ReadyAttempt {
    /// The slot's claim.
    pub claim: Claim,
    /// What the attempt made.
    pub output: AttemptOutput,
}

/// The READY finalize of one attempt, nothing riding ahead of it.
pub async fn finalize_ready(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
) -> Result<(), JobError> {
    let attempt = ReadyAttempt {
        claim: claim.clone(),
        output: output.clone(),
    };
    let (mut answers, _) = finalize_ready_all(pool, &[attempt], None::<Nothing>).await;
    answers.pop().expect("one answer for one attempt")
}

/// Nothing sent ahead of a finalize.
type Nothing = fn(&AsyncPgConnection) -> std::future::Ready<()>;

/// The READY finalize of `claim` alone, after a transaction it shared with other attempts
/// failed on a transient database error. That transaction may have committed, so its try
/// counts as this finalize's first: a fence that then matches nothing asks the job row
/// whether the attempt completed, as any try after the first does.
pub async fn finalize_ready_after_failed_batch(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
) -> Result<(), JobError> {
    let attempt = ReadyAttempt {
        claim: claim.clone(),
        output: output.clone(),
    };
    retry_alone(pool, &attempt, FirstTry::FailedInBatch).await
}

/// Finalizes every attempt READY, together where they can be, each answered in `attempts`'
/// order. `ahead` (autocommitted statements of its own, such as the freed slots' next claim)
/// is sent first in the flight of the first transaction, before its `BEGIN`, and does not
/// depend on it; returned is its answer, `None` when it was not sent (no connection could
/// be had). The tries after a failure go without it.
#[tracing::instrument(name = "finalize_ready", skip_all,
    fields(size = attempts.len(), job_ids = ?attempts.iter().map(|a| a.claim.job_id).collect::<Vec<_>>()))]
pub async fn finalize_ready_all<T>(
    pool: &DbPool,
    attempts: &[ReadyAttempt],
    ahead: Option<impl AsyncFnOnce(&AsyncPgConnection) -> T>,
) -> (Vec<Result<(), JobError>>, Option<T>) {
    let mut ahead = ahead;
    let mut ahead_answer = None;
    let mut answers: Vec<Option<Result<(), JobError>>> = attempts.iter().map(|_| None).collect();
    for group in groups(attempts) {
        let members: Vec<&ReadyAttempt> = group.iter().map(|&i| &attempts[i]).collect();
        let (first, answered) = try_once(pool, &members, ahead.take()).await;
        ahead_answer = ahead_answer.or(answered);
        for (i, answer) in group.into_iter().zip(settle(pool, &members, first).await) {
            answers[i] = Some(answer);
        }
    }
    let answers = answers
        .into_iter()
        .map(|answer| answer.expect("every attempt is in a group"))
        .collect();
    (answers, ahead_answer)
}

/// Which attempts share a transaction, as indices into `attempts`: every one that is not a
/// recording's video in one, first, and each recording's video in one of its own.
fn groups(attempts: &[ReadyAttempt]) -> Vec<Vec<usize>> {
    let (alone, together): (Vec<usize>, Vec<usize>) =
        (0..attempts.len()).partition(|&i| attempts[i].claim.kind == JobKind::Repackage);
    let together = (!together.is_empty()).then_some(together);
    together
        .into_iter()
        .chain(alone.into_iter().map(|i| vec![i]))
        .collect()
}

/// One try of the READY transaction of `members`, with `ahead`'s statements before its
/// `BEGIN` in the same flight (polled first, so sent first; the transaction's [`Writes`] are
/// worked out before either is queued). Returns the transaction's answer and `ahead`'s,
/// which is `None` when there was none or no connection could be had.
async fn try_once<T>(
    pool: &DbPool,
    members: &[&ReadyAttempt],
    ahead: Option<impl AsyncFnOnce(&AsyncPgConnection) -> T>,
) -> (Result<(), JobError>, Option<T>) {
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(error) => return (Err(error.into()), None),
    };
    let writes = Writes::of(members);
    let tx = PipelinedTx::new(&mut conn);
    let c = tx.conn();
    let ahead = async {
        match ahead {
            Some(ahead) => Some(ahead(c).await),
            None => None,
        }
    };
    let (ahead, finalized) = futures_util::future::join(ahead, transaction(&tx, &writes)).await;
    (finalized, ahead)
}

/// Each member's answer, from the first try's: a finalize alone tries again as
/// [`retry_transient`] says; a shared transaction that failed is tried again member by
/// member, all at once (each waits out its own backoff beside the others, taking the pool's
/// connections as they come).
async fn settle(
    pool: &DbPool,
    members: &[&ReadyAttempt],
    first: Result<(), JobError>,
) -> Vec<Result<(), JobError>> {
    if let [alone] = members {
        return vec![retry_alone(pool, alone, FirstTry::Answered(first)).await];
    }
    let error = match first {
        Ok(()) => {
            crate::metrics::FINALIZE_BATCH_SIZE.observe(members.len() as f64);
            return members.iter().map(|_| Ok(())).collect();
        }
        Err(error) => error,
    };
    let transient = is_transient(&error);
    tracing::warn!(error = %crate::telemetry::error_chain(&error), size = members.len(),
        transient, "a batch of finalizes failed as a whole; finalizing each on its own");
    let first = || {
        if transient {
            FirstTry::FailedInBatch
        } else {
            FirstTry::NotMade
        }
    };
    futures_util::future::join_all(members.iter().map(|m| retry_alone(pool, m, first()))).await
}

/// `attempt`'s READY transaction alone, tried again as [`retry_transient`] says after `first`.
async fn retry_alone(
    pool: &DbPool,
    attempt: &ReadyAttempt,
    first: FirstTry,
) -> Result<(), JobError> {
    let claim = &attempt.claim;
    retry_transient(pool, claim, Outcome::Completed, first, || async {
        try_once(pool, &[attempt], None::<Nothing>).await.0
    })
    .await
}

/// What one READY transaction writes, worked out before its first statement is queued. The
/// connection's writer sends whatever is queued whenever it runs, so work done between two
/// statements (an event's JSON, a sort) splits the flight: the server then answers a part
/// before the rest arrives, and a worker pays a send, a wake-up and a server read more per
/// finalize. Built once, the statements are queued back to back and go out together.
pub(super) struct Writes<'a> {
    /// The members, in video id order (the order of the uploaders' locks and the events).
    by_video: Vec<&'a ReadyAttempt>,
    videos: Vec<crate::domain::ids::VideoId>,
    facts: Vec<db::videos::ReadyFacts<'a>>,
    /// The prefixes each member's other attempts left behind (only members that have some).
    superseded: Vec<(&'a Claim, Vec<String>)>,
    /// The events, with no segment counts (a recording's are made once they are read).
    events: Vec<Event>,
    /// The jobs and their claims' tokens, in job id order (the fences' lock order).
    job_ids: Vec<i64>,
    tokens: Vec<crate::domain::ids::ClaimToken>,
}

impl<'a> Writes<'a> {
    /// The writes of `members` (one or more).
    pub(super) fn of(members: &[&'a ReadyAttempt]) -> Self {
        let by_video = sorted(members, |m| m.claim.video.0);
        let by_job = sorted(members, |m| m.claim.job_id);
        let superseded = by_video
            .iter()
            .map(|m| (&m.claim, superseded_prefixes(&m.claim)))
            .filter(|(_, dead)| !dead.is_empty())
            .collect();
        Self {
            videos: by_video.iter().map(|m| m.claim.video).collect(),
            facts: by_video.iter().map(|m| ready_facts(m)).collect(),
            superseded,
            events: events(&by_video, None),
            job_ids: by_job.iter().map(|m| m.claim.job_id).collect(),
            tokens: by_job.iter().map(|m| m.claim.token).collect(),
            by_video,
        }
    }
}

/// The READY transaction of `writes` (one member or more; a recording's video only alone)
/// on `tx`: in one round trip, or two for a recording's video, whose event counts the
/// segments kept, read in the transaction once its video is locked. Statements that fail
/// only in the client (a video or its owner gone) are those of a video whose job went with
/// it, so the fence fails on the server too.
pub(super) async fn transaction(tx: &PipelinedTx<'_>, writes: &Writes<'_>) -> Result<(), JobError> {
    let c = tx.conn();
    if let [recording] = writes.by_video[..]
        && recording.claim.kind == JobKind::Repackage
    {
        let began = tx.begin_with(async {
            futures_util::try_join!(write_videos(c, writes), segments_kept(c, recording))
        });
        let (_, live) = began.await?;
        let events = events(&writes.by_video, live);
        return tx.commit_with(events_and_fences(c, writes, &events)).await;
    }
    tx.run(async {
        futures_util::try_join!(
            write_videos(c, writes),
            events_and_fences(c, writes, &writes.events)
        )
        .map(drop)
    })
    .await
}

/// The first statements: for several members the plan setting their array statements need
/// ([`db::prepared::generic_plans_in_this_transaction`]), the uploaders' locks in id order,
/// the videos' facts, and what the members' other attempts left behind.
async fn write_videos(c: &AsyncPgConnection, writes: &Writes<'_>) -> Result<(), JobError> {
    let plans = async {
        if writes.videos.len() > 1 {
            db::prepared::generic_plans_in_this_transaction(c).await?;
        }
        Ok::<_, JobError>(())
    };
    let owners = async {
        match writes.videos[..] {
            [video] => lock_owner(c, video).await.map(drop),
            _ => db::users::lock_owners_of_videos(c, writes.videos.clone())
                .await
                .map(drop)
                .map_err(JobError::from),
        }
    };
    let set = async {
        match (&writes.videos[..], &writes.facts[..]) {
            ([video], [facts]) => db::videos::set_ready(c, *video, facts)
                .await
                .map(drop)
                .map_err(video_gone),
            _ => db::videos::set_all_ready(c, writes.videos.clone(), &writes.facts)
                .await
                .map(drop)
                .map_err(JobError::from),
        }
    };
    let superseded = futures_util::future::try_join_all(
        (writes.superseded.iter()).map(|(claim, dead)| owe_superseded(c, claim, dead)),
    );
    futures_util::try_join!(plans, owners, set, superseded).map(drop)
}

/// The last statements: the members' `events`, and as the LAST statement the fenced
/// completion of every member's job (which also closes its attempt).
async fn events_and_fences(
    c: &AsyncPgConnection,
    writes: &Writes<'_>,
    events: &[Event],
) -> Result<(), JobError> {
    let inserted = async {
        match events {
            [event] => db::deliveries::outbox::insert_stamped(c, event).await,
            _ => db::deliveries::outbox::insert_all_stamped(c, events).await,
        }
    };
    let completed = async {
        match (&writes.job_ids[..], &writes.tokens[..]) {
            ([id], [token]) => {
                db::jobs::complete(c, *id, *token, end(Outcome::Completed, None)).await
            }
            _ => {
                let (ids, tokens) = (writes.job_ids.clone(), writes.tokens.clone());
                db::jobs::complete_all(c, ids, tokens).await
            }
        }
    };
    let (_, completed) = futures_util::try_join!(inserted, completed)?;
    fenced(completed)
}

/// The `video.ready` events of `by_video`, in its order (`live`: a recording's kept and
/// excluded segments).
fn events(by_video: &[&ReadyAttempt], live: Option<(i64, i64)>) -> Vec<Event> {
    by_video
        .iter()
        .map(|m| {
            Event::video_ready(
                m.claim.video,
                m.claim.run,
                chrono::Utc::now(), // replaced by the video's updated_at (insert_stamped)
                ready_data(&m.output, live),
            )
        })
        .collect()
}

/// `members` in the order of `key`.
fn sorted<'a, K: Ord>(
    members: &[&'a ReadyAttempt],
    key: impl Fn(&ReadyAttempt) -> K,
) -> Vec<&'a ReadyAttempt> {
    let mut sorted = members.to_vec();
    sorted.sort_by_key(|m| key(m));
    sorted
}

/// A recording's video: moves its recording to `ready` with it, and reads the segments the
/// recording kept and excluded (`None` when the recording had already moved on).
async fn segments_kept(
    c: &AsyncPgConnection,
    recording: &ReadyAttempt,
) -> Result<Option<(i64, i64)>, JobError> {
    let video = recording.claim.video;
    let followed = db::recordings::videos::follow_video(c, video, RecordingState::Ready);
    let segments = db::recordings::videos::segments_of_video(c, video);
    let (followed, segments) = futures_util::try_join!(followed, segments)?;
    Ok((followed > 0).then_some(segments))
}

/// What an attempt that is not its run's first, of a later run or of a split video left
/// behind: every other attempt's and part's prefix. Empty for a first attempt of a first
/// run, which left nothing behind.
fn superseded_prefixes(claim: &Claim) -> Vec<String> {
    let split = claim.kind == JobKind::Stitch;
    keys::superseded_prefixes(claim.video, claim.run, claim.attempt, split)
}

/// In the READY transaction of an attempt that left `dead` prefixes behind: forgets the
/// ledger rows of every other attempt and part, and owes the bucket their prefixes
/// (`db::doomed_objects`). The worker deletes them right after the commit; if it dies first,
/// or S3 is down past its patience, a sweeper does 30 s later.
async fn owe_superseded(
    c: &AsyncPgConnection,
    claim: &Claim,
    dead: &[String],
) -> Result<(), JobError> {
    futures_util::try_join!(
        db::artifacts::forget_superseded(c, claim.video, claim.run, claim.attempt),
        db::doomed_objects::owe(c, &[], dead),
    )
    .map(drop)
    .map_err(JobError::from)
}

/// What a READY finalize writes on the video: the probe's facts and the attempt's live keys.
fn ready_facts(attempt: &ReadyAttempt) -> db::videos::ReadyFacts<'_> {
    let (claim, output) = (&attempt.claim, &attempt.output);
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
fn ready_data(output: &AttemptOutput, live: Option<(i64, i64)>) -> serde_json::Value {
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
