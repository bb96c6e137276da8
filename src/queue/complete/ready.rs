//! The READY finalize of one attempt: the uploader's lock, the video's facts, what the other
//! attempts left behind owed to the bucket, `video.ready` and as the LAST statement the fenced completion, in one transaction (two round trips for
//! a recording's video), tried again as [`super::retry`] says; optionally with the freed
//! slot's next claim behind its `COMMIT`.

use diesel_async::AsyncPgConnection;
use serde_json::json;

use super::retry::{FirstTry, retry_transient};
use crate::db::{self, DbPool};
use crate::domain::event::Event;
use crate::domain::job::{JobKind, Outcome};
use crate::domain::keys;
use crate::domain::recording::RecordingState;
use crate::domain::video::VideoStatus;
use crate::pipeline::AttemptOutput;
use crate::queue::error::{end, fenced, lock_owner, video_gone};
use crate::queue::{CarriedClaim, Claim, JobError, NextClaim};

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

/// [`finalize_ready`], with `next`'s claim of the freed slot's next job sent right behind the
/// `COMMIT`, in the same round trip: a busy worker then makes one round trip per job
/// instead of two. The claim is its own autocommitted statement (the plain claim, unchanged),
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
/// ([`super::batch`]) failed on a transient database error. That batch may have
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

/// The statements of the READY transaction of a video that is not a recording, issued on `c`
/// together so that they go out in one flight: the uploader's lock, the video, its event and,
/// as the LAST statement, the fenced completion. The event's time and owner are read from the
/// updated video row by the database, so nothing waits for an answer before the `COMMIT` is
/// sent. The only statements that can fail in the client alone (the video or its owner gone)
/// are those of a video whose job went with it, so the fence fails on the server too.
pub(super) async fn ready_statements(
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

/// The first statements of a READY finalize: the uploader's lock, then the video's facts and
/// what the other attempts left behind.
async fn lock_and_set_ready(
    c: &AsyncPgConnection,
    claim: &Claim,
    facts: &db::videos::ReadyFacts<'_>,
) -> Result<(), JobError> {
    futures_util::try_join!(
        lock_owner(c, claim.video),
        async {
            db::videos::set_ready(c, claim.video, facts)
                .await
                .map_err(video_gone)
        },
        owe_superseded(c, claim)
    )
    .map(drop)
}

/// In the READY transaction of an attempt that is not its run's first, of a later run or of a
/// split video: forgets the ledger rows of every other attempt and part, and owes the bucket
/// their prefixes (`db::doomed_objects`). The worker deletes them right after the commit; if
/// it dies first, or S3 is down past its patience, a sweeper does 30 s later. Nothing is sent
/// for a first attempt of a first run, which left nothing behind.
pub(super) async fn owe_superseded(c: &AsyncPgConnection, claim: &Claim) -> Result<(), JobError> {
    let split = claim.kind == JobKind::Stitch;
    let dead = keys::superseded_prefixes(claim.video, claim.run, claim.attempt, split);
    if dead.is_empty() {
        return Ok(());
    }
    futures_util::try_join!(
        db::artifacts::forget_superseded(c, claim.video, claim.run, claim.attempt),
        db::doomed_objects::owe(c, &[], &dead),
    )
    .map(drop)
    .map_err(JobError::from)
}

/// The last statements of a READY finalize: its event, and as the LAST statement the fenced
/// completion (which also closes the attempt).
async fn event_and_fence(
    c: &AsyncPgConnection,
    claim: &Claim,
    event: &Event,
) -> Result<(), JobError> {
    let (_, completed) = futures_util::try_join!(
        db::deliveries::outbox::insert_stamped(c, event),
        db::jobs::complete(c, claim.job_id, claim.token, end(Outcome::Completed, None)),
    )?;
    fenced(completed)
}

/// One try of the READY transaction, and `next`'s claim behind its `COMMIT` (the claim's
/// answer is `None` when `next` is).
pub(super) async fn finalize_ready_once(
    pool: &DbPool,
    claim: &Claim,
    output: &AttemptOutput,
    next: Option<NextClaim<'_>>,
) -> (Result<(), JobError>, CarriedClaim) {
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(error) => return (Err(error.into()), None),
    };
    let tx = db::pipelined::PipelinedTx::new(&mut conn);
    let c = tx.conn();
    // Sent behind the COMMIT when there is a next claim to make; nothing otherwise.
    let next_claim = || async move {
        match next {
            Some(next) => Some(next.one(c).await),
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
                    db::recordings::videos::follow_video(c, claim.video, RecordingState::Ready);
                let segments = db::recordings::videos::segments_of_video(c, claim.video);
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
pub(super) fn ready_facts<'a>(
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
pub(super) fn ready_data(output: &AttemptOutput, live: Option<(i64, i64)>) -> serde_json::Value {
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
