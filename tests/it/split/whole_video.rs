//! What acts on a split video acts on all of it: a part that fails fails the video once and
//! stops its other parts; an operator's cancel and retry take its own job and every part; a
//! delete takes everything; and a stitch that cannot pass its checks encodes the video whole
//! instead, still with one `video.ready`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use vidq::domain::failure::FailureCode;
use vidq::domain::ids::VideoId;
use vidq::domain::job::JobKind;
use vidq::domain::media::MediaError;
use vidq::pipeline::{AttemptPlan, Attempted, Handed, Pipeline};
use vidq::queue::JobBody;
use vidq::queue::complete::{RETRY_DELAY, fail_or_retry, parts};
use vidq::queue::operator::{self, OperatorAction, OperatorError};

use super::split_media;
use crate::support::app::TestApp;
use crate::support::clips::{self, SplitSource};
use crate::support::pipeline::upload_clip;
use crate::support::queue::{Worker, claim, fast_settings, video_id};
use crate::support::wait::wait_for_count;

fn pipeline(app: &TestApp, work: &std::path::Path) -> Pipeline {
    Pipeline {
        storage: app.storage.clone(),
        db: app.pool.clone(),
        media: split_media(),
        work_root: work.to_owned(),
        waits: Default::default(),
    }
}

/// A 20 s upload whose own job has been claimed, probed and planned by hand: its four parts
/// (three chunks, the audio) wait in the queue. Returns the app, alice's key, the video and
/// its own job's id.
async fn planned() -> (TestApp, String, VideoId, i64, tempfile::TempDir) {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let clip = clips::split_source(SplitSource::BFrameHeavy);
    let id = video_id(&upload_clip(&app, &key, &clip).await);
    let work = tempfile::tempdir().unwrap();
    let head = claim(&app, "planner", 60.0).await.unwrap();
    let Attempted::Handed(Handed::Planned(plan)) = pipeline(&app, work.path())
        .run(&head.plan(), &CancellationToken::new())
        .await
        .unwrap()
    else {
        panic!("a 20 s source is split");
    };
    parts::record_plan(&app.pool, &head, &plan).await.unwrap();
    let waiting = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE parent_id = {} AND status = 'PENDING'",
        head.job_id
    );
    assert_eq!(app.count(&waiting).await, 4);
    (app, key, id, head.job_id, work)
}

/// Runs an in-process worker named `node` with `body` until `id` is READY.
async fn ready_on<B: JobBody>(app: &TestApp, body: Arc<B>, node: &str, id: VideoId) {
    let worker = Worker::start(&app.db.url, body, fast_settings(node)).await;
    wait_for_count(
        app,
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready'"),
        1,
        Duration::from_secs(120),
    )
    .await;
    worker.stop().await;
}

fn events(id: VideoId, kind: &str) -> String {
    format!(
        "SELECT count(*) AS n FROM notification_outbox WHERE video_id = '{id}' AND event_type = '{kind}'"
    )
}

fn open_jobs(id: VideoId) -> String {
    format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE video_id = '{id}' AND status IN ('PENDING', 'PROCESSING')"
    )
}

#[tokio::test]
async fn a_part_that_fails_for_good_sends_the_video_to_the_whole_encode() {
    let (app, key, id, head, work) = planned().await;
    let first = claim(&app, "enc-a", 60.0).await.unwrap();
    let second = claim(&app, "enc-b", 60.0).await.unwrap();
    // A decode error the whole encode may not meet (a chunk's seek, a part's own decode).
    let broken = MediaError::permanent(FailureCode::InvalidMedia, "injected: unreadable");
    let retried = fail_or_retry(&app.pool, &first, &broken, RETRY_DELAY)
        .await
        .unwrap();
    assert!(!retried);
    assert_eq!(app.count(&events(id, "video.failed")).await, 0);
    let whole = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE id = {head} AND kind = 'encode' AND whole AND status = 'PENDING'
            AND available_at <= statement_timestamp()"
    );
    assert_eq!(app.count(&whole).await, 1, "the head is a whole encode now");
    let parts = format!("SELECT count(*) AS n FROM video_encoding_jobs WHERE parent_id = {head}");
    assert_eq!(app.count(&parts).await, 0, "its parts are gone");
    let owed = format!(
        "SELECT count(*) AS n FROM doomed_objects WHERE key = '{}' AND is_prefix",
        vidq::domain::keys::parts_prefix(id, 1)
    );
    assert_eq!(app.count(&owed).await, 1, "and their objects owed");
    // The part another worker still holds finds its claim gone, and writes nothing.
    let late = parts::record_part_stored(&app.pool, &second).await;
    assert!(
        matches!(late, Err(vidq::queue::JobError::ClaimLost)),
        "{late:?}"
    );
    // The whole encode runs on the head's next attempt: planning was its first (I6).
    let body = Arc::new(pipeline(&app, work.path()));
    ready_on(&app, body, "enc-c", id).await;
    let video = app.video(&key, &id).await;
    assert_eq!(video["attempts"], 2, "{video}");
    assert_eq!(app.count(&events(id, "video.ready")).await, 1);
}

#[tokio::test]
async fn a_part_that_finds_the_original_gone_fails_the_video_once_and_closes_every_other_part() {
    let (app, key, id, _, _work) = planned().await;
    let first = claim(&app, "enc-a", 60.0).await.unwrap();
    let second = claim(&app, "enc-b", 60.0).await.unwrap();
    assert!(first.kind.is_part() && second.kind.is_part());
    // What the whole encode would meet too: the video fails from the part.
    let broken = MediaError::permanent(FailureCode::OriginalMissing, "injected: gone");
    let retried = fail_or_retry(&app.pool, &first, &broken, RETRY_DELAY)
        .await
        .unwrap();
    assert!(!retried);
    let video = app.video(&key, &id).await;
    assert_eq!(video["status"], "failed", "{video}");
    assert_eq!(app.count(&events(id, "video.failed")).await, 1);
    assert_eq!(app.count(&open_jobs(id)).await, 0, "head and parts closed");
    // The run's parts are owed to the bucket in the same transaction.
    let owed = format!(
        "SELECT count(*) AS n FROM doomed_objects WHERE key = '{}' AND is_prefix",
        vidq::domain::keys::parts_prefix(id, 1)
    );
    assert_eq!(app.count(&owed).await, 1);
    // The part another worker still holds finds its claim gone, and writes nothing.
    let late = parts::record_part_stored(&app.pool, &second).await;
    assert!(
        matches!(late, Err(vidq::queue::JobError::ClaimLost)),
        "{late:?}"
    );
    // A second failing part announces nothing more.
    let again = fail_or_retry(&app.pool, &second, &broken, RETRY_DELAY).await;
    assert!(
        matches!(again, Err(vidq::queue::JobError::ClaimLost)),
        "{again:?}"
    );
    assert_eq!(app.count(&events(id, "video.failed")).await, 1);
    assert!(
        claim(&app, "enc-c", 60.0).await.is_none(),
        "nothing left to claim"
    );
}

#[tokio::test]
async fn cancel_and_retry_act_on_the_whole_split_video() {
    let (app, key, id, head, work) = planned().await;
    // A part is not the video: an operator acts on the video's own job.
    let part: i64 = app
        .count(&format!(
            "SELECT min(id) AS n FROM video_encoding_jobs WHERE parent_id = {head}"
        ))
        .await;
    let refused = operator::apply(&app.pool, part, OperatorAction::Cancel).await;
    assert!(
        matches!(refused, Err(OperatorError::PartOfVideo { head: h, .. }) if h == head),
        "{refused:?}"
    );

    operator::apply(&app.pool, head, OperatorAction::Cancel)
        .await
        .unwrap();
    let video = app.video(&key, &id).await;
    assert_eq!(video["error"]["code"], "cancelled", "{video}");
    assert_eq!(app.count(&open_jobs(id)).await, 0, "every part stopped");
    assert_eq!(app.count(&events(id, "video.failed")).await, 1);

    // The retry is a new run of all of it: the old parts go, the new run plans its own.
    operator::apply(&app.pool, head, OperatorAction::Retry)
        .await
        .unwrap();
    let old_parts =
        format!("SELECT count(*) AS n FROM video_encoding_jobs WHERE parent_id = {head}");
    assert_eq!(app.count(&old_parts).await, 0);
    let body = Arc::new(pipeline(&app, work.path()));
    ready_on(&app, body, "enc-a", id).await;
    let run_two = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE parent_id = {head} AND run = 2 AND status = 'COMPLETED'"
    );
    assert_eq!(app.count(&run_two).await, 4);
    let ready = format!(
        "SELECT count(*) AS n FROM notification_outbox WHERE video_id = '{id}'
           AND event_type = 'video.ready' AND payload->'data'->>'run' = '2'"
    );
    assert_eq!(app.count(&ready).await, 1);
}

#[tokio::test]
async fn deleting_a_split_video_takes_its_parts_with_it() {
    let (app, key, id, _, _work) = planned().await;
    let chunk = claim(&app, "enc-a", 60.0).await.unwrap();
    let response = app.delete(&key, &format!("/v1/videos/{id}")).await;
    assert!(response.status().is_success(), "{:?}", response.status());
    let jobs = format!("SELECT count(*) AS n FROM video_encoding_jobs WHERE video_id = '{id}'");
    assert_eq!(app.count(&jobs).await, 0);
    let late = parts::record_part_stored(&app.pool, &chunk).await;
    assert!(
        matches!(late, Err(vidq::queue::JobError::ClaimLost)),
        "{late:?}"
    );
}

/// The real pipeline, except that before a stitch runs it stores chunk 0's first rendition
/// over chunk 1's: the joined stream then shows chunk 0's frames twice, which the stitch's
/// checks must catch.
struct CorruptsChunkOne(Pipeline);

impl JobBody for CorruptsChunkOne {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Attempted, MediaError>> {
        Box::pin(async move {
            if plan.kind == JobKind::Stitch {
                let key =
                    |part| vidq::domain::keys::part_object(plan.video, plan.run, part, 1, "v0.ts");
                let bytes = self.0.storage.get_bytes(&key(0)).await.unwrap().unwrap();
                self.0
                    .storage
                    .put_bytes(&key(1), bytes, "video/mp2t")
                    .await
                    .unwrap();
            }
            self.0.run(plan, cancel).await
        })
    }

    fn after_ready(
        &self,
        video: VideoId,
        run: i32,
        attempt: i32,
        dead: Vec<String>,
    ) -> BoxFuture<'_, ()> {
        self.0.after_ready(video, run, attempt, dead)
    }
}

#[tokio::test]
async fn a_stitch_that_fails_its_checks_falls_back_to_a_whole_encode() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let clip = clips::split_source(SplitSource::BFrameHeavy);
    let id = video_id(&upload_clip(&app, &key, &clip).await);
    let work = tempfile::tempdir().unwrap();
    let body = Arc::new(CorruptsChunkOne(pipeline(&app, work.path())));
    ready_on(&app, body, "enc-a", id).await;
    // Encoded whole by the stitch's own attempt (the second of the head's: planning was the
    // first), so a fallback costs no attempt whatever the stitch's number.
    let stitched = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE video_id = '{id}' AND parent_id IS NULL AND kind = 'stitch'
            AND status = 'COMPLETED' AND attempt_count = 2"
    );
    assert_eq!(app.count(&stitched).await, 1);
    let video = app.video(&key, &id).await;
    assert_eq!(video["attempts"], 2, "{video}");
    assert_eq!(app.count(&events(id, "video.ready")).await, 1);
    let out = super::download_outputs(&app, id, 2).await;
    let source = super::quality::frame_count(&clip).await;
    assert_eq!(super::quality::frame_count(&out.mp4).await, source);
}

#[tokio::test]
async fn the_last_two_parts_stored_at_once_make_the_stitch_claimable() {
    let (app, _key, id, head, _work) = planned().await;
    let mut parts_held = Vec::new();
    for node in ["enc-a", "enc-b", "enc-c", "enc-d"] {
        parts_held.push(claim(&app, node, 60.0).await.unwrap());
    }
    for part in &parts_held[..2] {
        parts::record_part_stored(&app.pool, part).await.unwrap();
    }
    // The head's row held elsewhere: both last parts' transactions queue behind it (seen in
    // pg_stat_activity), then run one after the other once it is let go.
    let pool = vidq::db::connect(&app.db.url, 1).await.unwrap();
    let mut holder = pool.get_owned().await.unwrap();
    {
        use diesel_async::RunQueryDsl;
        for sql in [
            "BEGIN".to_owned(),
            format!("SELECT id FROM video_encoding_jobs WHERE id = {head} FOR UPDATE"),
        ] {
            diesel::sql_query(sql).execute(&mut holder).await.unwrap();
        }
    }
    let (third, fourth) = (parts_held[2].clone(), parts_held[3].clone());
    let both = tokio::spawn({
        let pool = app.pool.clone();
        async move {
            tokio::join!(
                parts::record_part_stored(&pool, &third),
                parts::record_part_stored(&pool, &fourth)
            )
        }
    });
    crate::support::wait::wait_for_lock_waits(&app, 2).await;
    {
        use diesel_async::RunQueryDsl;
        diesel::sql_query("ROLLBACK")
            .execute(&mut holder)
            .await
            .unwrap();
    }
    let (a, b) = both.await.unwrap();
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    let claimable = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE id = {head} AND kind = 'stitch' AND status = 'PENDING'
            AND available_at <= statement_timestamp()"
    );
    assert_eq!(
        app.count(&claimable).await,
        1,
        "the stitch waits for nothing more"
    );
    let stitch = claim(&app, "enc-e", 60.0).await.unwrap();
    assert_eq!((stitch.job_id, stitch.kind), (head, JobKind::Stitch));
    assert_eq!(app.count(&open_jobs(id)).await, 1, "only the stitch runs");
}

#[tokio::test]
async fn a_part_that_dies_in_its_last_attempt_is_reaped_with_its_whole_video() {
    let (app, key, id, _, _work) = planned().await;
    // The first part's lease runs out three times; the third time the reaper buries it.
    let mut part = claim(&app, "enc-a", 60.0).await.unwrap();
    for _ in 1..vidq::domain::job::MAX_ATTEMPTS {
        crate::support::queue::expire_lease(&app, &part).await;
        let again = claim(&app, "enc-a", 60.0).await.unwrap();
        assert_eq!(again.job_id, part.job_id);
        part = again;
    }
    crate::support::queue::expire_lease(&app, &part).await;
    let reaped = vidq::queue::reaper::reap_dead(&app.pool).await.unwrap();
    assert_eq!(reaped, 1);
    let video = app.video(&key, &id).await;
    assert_eq!(video["error"]["code"], "attempts_exhausted", "{video}");
    assert_eq!(app.count(&events(id, "video.failed")).await, 1);
    assert_eq!(
        app.count(&open_jobs(id)).await,
        0,
        "head and other parts closed"
    );
    assert!(claim(&app, "enc-b", 60.0).await.is_none());
}

#[tokio::test]
async fn cancelling_a_split_video_leaves_none_of_its_parts_behind() {
    let (app, key, id, head, work) = planned().await;
    // One part stored (its objects in the bucket), one still running on another node.
    let stored = claim(&app, "enc-a", 60.0).await.unwrap();
    let handed = pipeline(&app, work.path())
        .run(&stored.plan(), &CancellationToken::new())
        .await
        .unwrap();
    assert!(matches!(handed, Attempted::Handed(Handed::PartStored)));
    parts::record_part_stored(&app.pool, &stored).await.unwrap();
    let running = claim(&app, "enc-b", 60.0).await.unwrap();
    let part_prefix = vidq::domain::keys::parts_prefix(id, 1);
    assert!(
        !app.storage
            .list_prefix(&part_prefix)
            .await
            .unwrap()
            .is_empty(),
        "the stored part is in the bucket"
    );

    operator::apply(&app.pool, head, OperatorAction::Cancel)
        .await
        .unwrap();
    assert_eq!(app.video(&key, &id).await["error"]["code"], "cancelled");
    // The running part shows as cancelled: no claim kept, its attempt logged as lost.
    let cancelled = format!(
        "SELECT count(*) AS n FROM video_encoding_jobs
          WHERE id = {} AND status = 'COMPLETED' AND claim_token IS NULL
            AND claimed_by IS NULL AND last_error = 'cancelled with its video'",
        running.job_id
    );
    assert_eq!(app.count(&cancelled).await, 1);
    let logged = format!(
        "SELECT count(*) AS n FROM job_attempt_log
          WHERE job_id = {} AND outcome = 'lost' AND error_code = 'cancelled'",
        running.job_id
    );
    assert_eq!(app.count(&logged).await, 1);
    // The cancel forgot the parts' ledger rows and owed their prefix, in its transaction.
    let rows = format!(
        "SELECT count(*) AS n FROM video_artifacts WHERE video_id = '{id}' AND part IS NOT NULL"
    );
    assert_eq!(app.count(&rows).await, 0);
    let owed = format!(
        "SELECT count(*) AS n FROM doomed_objects WHERE key = '{part_prefix}' AND is_prefix"
    );
    assert_eq!(app.count(&owed).await, 1);
    // The part that was still running lands its files after the cancel: its claim is gone,
    // and so is its ledger row, so they are an orphan of a failed video.
    let late = pipeline(&app, work.path())
        .run(&running.plan(), &CancellationToken::new())
        .await;
    assert!(
        late.is_err(),
        "a part whose claim is gone stores nothing: {late:?}"
    );
    let (_, part) = running.part_of.unwrap();
    let late_prefix = vidq::domain::keys::part_attempt_prefix(id, 1, part, running.attempt);
    assert_eq!(
        app.storage.list_prefix(&late_prefix).await.unwrap(),
        Vec::<String>::new(),
        "nothing of the late part reached the bucket"
    );
    // A sweeper pays the debt once it is due (made due here rather than waited for): no
    // part is left, and `vidq reconcile` with no grace finds the ledger and the bucket agree.
    {
        use diesel_async::RunQueryDsl;
        let mut conn = app.pool.get().await.unwrap();
        diesel::sql_query("UPDATE doomed_objects SET next_try_at = clock_timestamp()")
            .execute(&mut conn)
            .await
            .unwrap();
        let due = vidq::db::doomed_objects::take_due(&mut conn, 64, 300.0)
            .await
            .unwrap();
        drop(conn);
        let deleted = vidq::app::doomed::pay(&app.storage, &app.pool, due).await;
        assert!(deleted > 0, "the stored part's objects were deleted");
    }
    let left = app.storage.list_prefix(&part_prefix).await.unwrap();
    assert!(left.is_empty(), "parts left in the bucket: {left:?}");
    crate::support::reconcile::expect(
        &crate::support::reconcile::reconcile(&app, &["--grace-secs", "0"]).await,
        0,
    );
}
