//! A worker with several slots: its claims go out as one statement, and finalizes that meet
//! commit in one transaction (`queue::complete::ready`), each still fenced on its own claim,
//! with the slots' next claims in one statement ahead of it (`queue::claim_ahead`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use vidq::queue::claim_ahead::Heard;
use vidq::queue::complete::{self, ReadyAttempt};
use vidq::queue::{Claim, JobError};

use crate::support::app::TestApp;
use crate::support::db::{UsersHeld, plans_of};
use crate::support::proxy::{FailOnce, Failure};
use crate::support::queue::{
    RIDERS_NODE, Worker, claim, each_job_ran_once_and_announced_once, expire_lease, fast_settings,
    finalize_riding, finalize_together, job_heard, ready, riders, video_id,
};
use crate::support::scripted::{Scripted, Step, output};
use crate::support::wait::{wait_for_count, wait_for_lock_waits};

async fn claim_some(app: &TestApp, node: &str, lease_secs: f64, most: usize) -> Vec<Claim> {
    let conn = app.pool.get().await.unwrap();
    vidq::db::jobs::claim_some(&conn, node, lease_secs, most)
        .await
        .unwrap()
        .into_iter()
        .map(Claim::from)
        .collect()
}

/// `n` uploaded videos of one user, each with its job queued.
async fn queued_jobs(app: &TestApp, n: usize) {
    let key = app.create_user("alice").await;
    for _ in 0..n {
        app.uploaded_video(&key).await;
    }
}

#[tokio::test]
async fn one_statement_claims_several_jobs_each_under_its_own_token_and_no_more_than_there_are() {
    let app = TestApp::spawn().await;
    queued_jobs(&app, 3).await;
    let claimed = claim_some(&app, "node-a", 30.0, 2).await;
    assert_eq!(claimed.len(), 2);
    assert_ne!(claimed[0].token, claimed[1].token);
    assert!(
        claimed[0].job_id < claimed[1].job_id,
        "handed out in id order"
    );
    let rest = claim_some(&app, "node-b", 30.0, 5).await;
    assert_eq!(rest.len(), 1, "only one job was left");
    assert!(claim_some(&app, "node-c", 30.0, 5).await.is_empty());
    assert_eq!(
        app.count(
            "SELECT count(DISTINCT claim_token) AS n FROM video_encoding_jobs
              WHERE status = 'PROCESSING' AND attempt_count = 1 AND lease_until > now()"
        )
        .await,
        3
    );
    for claim in claimed.iter().chain(&rest) {
        let expected = if rest[0].job_id == claim.job_id {
            "node-b"
        } else {
            "node-a"
        };
        assert_eq!(
            app.count(&format!(
                "SELECT count(*) AS n FROM video_encoding_jobs
                  WHERE id = {} AND claim_token = '{}' AND claimed_by = '{expected}'",
                claim.job_id, claim.token
            ))
            .await,
            1
        );
    }
}

/// A claim of several jobs runs from one generic plan once PostgreSQL has planned it a few
/// times. Behind `LIMIT $n` it was planned again on every execution over a long queue: the
/// generic plan, which must guess the row count, scans the whole job table.
#[tokio::test]
async fn a_claim_of_several_jobs_is_not_planned_again_on_every_execution() {
    let app = TestApp::spawn().await;
    app.create_user("alice").await;
    // A queue long enough for a whole-table plan to cost more than looking rows up by key.
    let queue = "
        WITH owner AS (SELECT id FROM users LIMIT 1),
        n AS (SELECT gen_random_uuid() AS id FROM generate_series(1, 5000)),
        up AS (INSERT INTO uploads (id, owner_id, object_key, filename, content_type,
                                    declared_size, state, expires_at)
               SELECT n.id, owner.id, 'originals/' || n.id, 'clip.mp4', 'video/mp4', 1,
                      'confirmed', now() + interval '1 day' FROM n, owner RETURNING id),
        vid AS (INSERT INTO videos (id, owner_id, upload_id)
                SELECT gen_random_uuid(), owner.id, up.id FROM up, owner RETURNING id, upload_id)
        INSERT INTO video_encoding_jobs (video_id, original_s3_key)
        SELECT vid.id, 'originals/' || vid.upload_id FROM vid";
    let mut conn = vidq::db::pool::dedicated(&app.db.url).await.unwrap();
    for sql in [queue, "ANALYZE"] {
        diesel_async::RunQueryDsl::execute(diesel::sql_query(sql), &mut conn)
            .await
            .unwrap();
    }
    for _ in 0..12 {
        let claimed = vidq::db::jobs::claim_some(&conn, "node-a", 30.0, 2)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2);
    }
    let plans = plans_of(&mut conn, r"earlier\.id < j\.id").await;
    assert_eq!(plans.statements, 1);
    // PostgreSQL plans a statement 5 times for its parameters before it weighs a generic plan.
    assert!(
        plans.generic_plans >= 6 && plans.custom_plans <= 6,
        "generic {} / custom {} of 12 executions",
        plans.generic_plans,
        plans.custom_plans
    );
}

/// The statements of a batch of finalizes run from their generic plans. Over array parameters
/// PostgreSQL would otherwise plan each of them again on every execution.
#[tokio::test]
async fn a_batchs_statements_are_not_planned_again_on_every_execution() {
    let app = TestApp::spawn().await;
    queued_jobs(&app, 16).await;
    // One connection, so that its prepared statements are the batches'.
    let pool = vidq::db::pool::connect(&app.db.url, 1).await.unwrap();
    for _ in 0..8 {
        let claimed = claim_some(&app, "node-a", 30.0, 2).await;
        let batch = [ready(&claimed[0]), ready(&claimed[1])];
        for finalized in finalize_together(&pool, &batch).await {
            assert!(finalized.is_ok(), "{finalized:?}");
        }
    }
    let mut conn = pool.get().await.unwrap();
    let plans = plans_of(&mut conn, r"unnest\(|= ANY\(\$1\)").await;
    // The owners' locks, the videos, the events and the fenced completions, 8 times each.
    assert_eq!(
        (plans.statements, plans.generic_plans, plans.custom_plans),
        (4, 32, 0)
    );
}

#[tokio::test]
async fn a_batch_commits_every_video_event_and_job_in_one_transaction_and_claims_the_next_jobs() {
    let app = TestApp::spawn().await;
    queued_jobs(&app, 6).await;
    let claimed = claim_some(&app, "node-a", 30.0, 3).await;
    assert_eq!(claimed.len(), 3);
    // Three slots finish; two want a next job and one does not. Three jobs are left.
    let batch: Vec<ReadyAttempt> = claimed.iter().map(ready).collect();
    let (riders, mut listeners) = riders(&[true, false, true]);
    let (answers, orphans) = finalize_riding(&app.pool, &batch, riders).await;
    assert_eq!(answers.len(), 3);
    for finalized in &answers {
        assert!(finalized.is_ok(), "{finalized:?}");
    }
    assert!(orphans.is_empty(), "every slot that asked was listening");
    let first = job_heard(listeners[0].take().unwrap()).await;
    let third = job_heard(listeners[2].take().unwrap()).await;
    assert!(first.is_some() && third.is_some() && first != third);
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM video_encoding_jobs
              WHERE id IN ({}, {}) AND status = 'PROCESSING' AND claimed_by = '{RIDERS_NODE}'",
            first.unwrap(),
            third.unwrap()
        ))
        .await,
        2
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PENDING'")
            .await,
        1,
        "no job is claimed for the slot that asked for nothing"
    );

    let ids = claimed
        .iter()
        .map(|c| format!("'{}'", c.video))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM videos WHERE id IN ({ids}) AND status = 'ready'
                AND live_attempt = 1 AND hls_key IS NOT NULL"
        ))
        .await,
        3
    );
    // One transaction: the three jobs and the three events carry the same xmin.
    assert_eq!(
        app.count(&format!(
            "SELECT count(DISTINCT xmin::text) AS n FROM (
                 SELECT xmin FROM video_encoding_jobs WHERE video_id IN ({ids})
                 UNION ALL
                 SELECT xmin FROM notification_outbox
                  WHERE video_id IN ({ids}) AND event_type = 'video.ready') rows"
        ))
        .await,
        1
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM video_encoding_jobs
              WHERE video_id IN ({ids}) AND status = 'COMPLETED'"
        ))
        .await,
        3
    );
    // Each event is stamped with its own video's time and names its own video.
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM notification_outbox o JOIN videos v ON v.id = o.video_id
              WHERE o.video_id IN ({ids}) AND o.event_type = 'video.ready'
                AND o.payload->>'video_id' = v.id::text
                AND (o.payload->>'occurred_at')::timestamptz = v.updated_at"
        ))
        .await,
        3
    );
}

/// Slots hear their next claims as soon as the claim statement answers, ahead of the batch's
/// transaction: here another transaction holds the uploader's row, so the batch waits at its
/// first statement, and both asking slots have their next jobs all the same. The batch
/// commits once the row is let go.
#[tokio::test]
async fn slots_hear_their_next_claims_before_their_batch_commits() {
    let app = TestApp::spawn().await;
    queued_jobs(&app, 5).await;
    let claimed = claim_some(&app, "node-a", 30.0, 3).await;
    let held = UsersHeld::hold(&app.db.url).await;
    let batch: Vec<ReadyAttempt> = claimed.iter().map(ready).collect();
    let (riders, listeners) = riders(&[true, false, true]);
    let pool = app.pool.clone();
    let committing = tokio::spawn(async move { finalize_riding(&pool, &batch, riders).await });
    let mut next_jobs = Vec::new();
    for next in listeners.into_iter().flatten() {
        let job = tokio::time::timeout(Duration::from_secs(10), job_heard(next))
            .await
            .expect("the claims answer while the batch waits for the uploader's row")
            .expect("two jobs were waiting");
        next_jobs.push(job);
    }
    assert_ne!(next_jobs[0], next_jobs[1]);
    // Its transaction is blocked behind the held row (`pg_stat_activity` shows it waiting
    // for the lock), so it cannot have committed.
    wait_for_lock_waits(&app, 1).await;
    assert!(
        !committing.is_finished(),
        "the batch waits for the uploader's row"
    );
    held.let_go().await;
    let (answers, orphans) = committing.await.unwrap();
    for finalized in &answers {
        assert!(finalized.is_ok(), "{finalized:?}");
    }
    assert!(orphans.is_empty(), "both asking slots were listening");
    let done = claimed
        .iter()
        .map(|c| c.job_id.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM video_encoding_jobs WHERE id IN ({done}) AND status = 'COMPLETED'"
        ))
        .await,
        3
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM video_encoding_jobs
              WHERE id IN ({}, {}) AND status = 'PROCESSING' AND claimed_by = '{RIDERS_NODE}'",
            next_jobs[0], next_jobs[1]
        ))
        .await,
        2
    );
}

#[tokio::test]
async fn a_lost_fence_in_a_batch_rolls_the_batch_back_and_costs_only_its_own_finalize() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let lost_video = app.uploaded_video(&key).await;
    let zombie = claim(&app, "zombie", 30.0).await.unwrap();
    assert_eq!(zombie.video, video_id(&lost_video));
    for _ in 0..2 {
        app.uploaded_video(&key).await;
    }
    let held = claim_some(&app, "node-a", 30.0, 2).await;
    expire_lease(&app, &zombie).await;
    let winner = claim(&app, "winner", 30.0).await.unwrap();
    assert_eq!(
        winner.job_id, zombie.job_id,
        "the expired lease was taken over"
    );

    let batch = [ready(&held[0]), ready(&zombie), ready(&held[1])];
    let answers = finalize_together(&app.pool, &batch).await;
    assert!(answers[0].is_ok(), "{:?}", answers[0]);
    assert!(
        matches!(answers[1], Err(JobError::ClaimLost)),
        "{:?}",
        answers[1]
    );
    assert!(answers[2].is_ok(), "{:?}", answers[2]);

    // I3: the lost claim's video, job and events are as the winner's claim left them.
    let lost = zombie.video;
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM videos WHERE id = '{lost}' AND status = 'queued'"
        ))
        .await,
        1
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM notification_outbox
              WHERE video_id = '{lost}' AND event_type = 'video.ready'"
        ))
        .await,
        0
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM video_encoding_jobs
              WHERE id = {} AND status = 'PROCESSING' AND claim_token = '{}'",
            winner.job_id, winner.token
        ))
        .await,
        1
    );
    // The other two finalized on their own after the batch rolled back: one event each.
    assert_eq!(
        app.count("SELECT count(*) AS n FROM videos WHERE status = 'ready'")
            .await,
        2
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        2
    );
}

#[tokio::test]
async fn a_finalize_retried_after_its_batch_failed_finds_the_batch_committed_or_the_claim_lost() {
    let app = TestApp::spawn().await;
    queued_jobs(&app, 3).await;
    let mut claimed = claim_some(&app, "node-a", 30.0, 2).await;
    claimed.push(claim(&app, "node-a", 30.0).await.unwrap());
    // A batch that committed, though its answer never reached the worker.
    let batch = [ready(&claimed[0]), ready(&claimed[1])];
    for finalized in finalize_together(&app.pool, &batch).await {
        finalized.unwrap();
    }
    for claim in &claimed[..2] {
        let plan = claim.plan();
        complete::finalize_ready_after_failed_batch(&app.pool, claim, &output(&plan))
            .await
            .expect("the attempt's own row says it completed");
    }
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        2,
        "nothing was written twice"
    );
    // A claim that was lost meanwhile is lost, not taken for committed.
    expire_lease(&app, &claimed[2]).await;
    let winner = claim(&app, "winner", 30.0).await.unwrap();
    assert_eq!(winner.job_id, claimed[2].job_id);
    let plan = claimed[2].plan();
    let late =
        complete::finalize_ready_after_failed_batch(&app.pool, &claimed[2], &output(&plan)).await;
    assert!(matches!(late, Err(JobError::ClaimLost)), "{late:?}");
}

#[tokio::test]
async fn a_worker_with_several_slots_finishes_every_job_exactly_once() {
    let app = TestApp::spawn().await;
    queued_jobs(&app, 40).await;
    let body = Scripted::new(Step::Succeed(Duration::from_millis(2)));
    let mut settings = fast_settings("many-slots");
    settings.slots = 6;
    let worker = Worker::start(&app.db.url, Arc::clone(&body), settings).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'COMPLETED'",
        40,
        Duration::from_secs(30),
    )
    .await;
    worker.stop().await;
    each_job_ran_once_and_announced_once(&app, &body, 40).await;
    // Slots that finished together committed together: some jobs share a transaction.
    assert!(
        app.count("SELECT count(DISTINCT xmin::text) AS n FROM video_encoding_jobs")
            .await
            < 40,
        "no two finalizes ever shared a commit"
    );
}

#[tokio::test]
async fn slots_that_ask_for_more_jobs_than_are_left_get_what_there_is_and_then_nothing() {
    let app = TestApp::spawn().await;
    queued_jobs(&app, 4).await;
    let claimed = claim_some(&app, "node-a", 30.0, 3).await;
    let batch: Vec<ReadyAttempt> = claimed.iter().map(ready).collect();
    let (riders, listeners) = riders(&[true, true, true]);
    let (answers, orphans) = finalize_riding(&app.pool, &batch, riders).await;
    for finalized in &answers {
        assert!(finalized.is_ok(), "{finalized:?}");
    }
    assert!(orphans.is_empty());
    let mut carried = Vec::new();
    for next in listeners.into_iter().flatten() {
        carried.push(job_heard(next).await);
    }
    assert!(
        carried[0].is_some(),
        "the one job left goes to the first slot"
    );
    assert_eq!(
        &carried[1..],
        &[None, None],
        "the others learn the queue is empty"
    );
}

/// Three jobs claimed on `app`'s own pool, two more left claimable, and a pool of one
/// connection to `app`'s database through a [`FailOnce`] proxy that fails the connection
/// that sends the first claim's token: the batch's fenced completion, which its `COMMIT`
/// follows on the wire. That connection has already committed a batch of two other jobs, so
/// it sends the batch's statements as a busy worker does, prepared, without waiting for
/// anything before its `COMMIT`.
async fn three_claims_and_a_pool_failing_on_their_batch(
    app: &TestApp,
    failure: Failure,
) -> (Vec<Claim>, vidq::db::DbPool, FailOnce) {
    queued_jobs(app, 7).await;
    let earlier = claim_some(app, "node-a", 30.0, 2).await;
    let claimed = claim_some(app, "node-a", 30.0, 3).await;
    assert_eq!(claimed.len(), 3);
    let proxy =
        FailOnce::in_front_of(&app.db.url, claimed[0].token.0.as_bytes().to_vec(), failure).await;
    let pool = vidq::db::connect(&proxy.url_for(&app.db.url), 1)
        .await
        .unwrap();
    let warm_up: Vec<ReadyAttempt> = earlier.iter().map(ready).collect();
    for finalized in finalize_together(&pool, &warm_up).await {
        finalized.unwrap();
    }
    assert!(!proxy.fired.load(Ordering::SeqCst));
    (claimed, pool, proxy)
}

/// Of the jobs of `claims`: how many distinct transactions completed them, and how many
/// are completed.
async fn completing_transactions(app: &TestApp, claims: &[Claim]) -> (i64, i64) {
    let ids = claims
        .iter()
        .map(|c| c.job_id.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let query = |what: &str| {
        format!(
            "SELECT {what} AS n FROM video_encoding_jobs WHERE id IN ({ids}) AND status = 'COMPLETED'"
        )
    };
    (
        app.count(&query("count(DISTINCT xmin::text)")).await,
        app.count(&query("count(*)")).await,
    )
}

#[tokio::test]
async fn a_batch_whose_commit_answer_is_lost_is_found_committed_and_announced_once() {
    let app = TestApp::spawn().await;
    let (claimed, pool, proxy) =
        three_claims_and_a_pool_failing_on_their_batch(&app, Failure::AnswerLost).await;
    let batch: Vec<ReadyAttempt> = claimed.iter().map(ready).collect();

    let answers = finalize_together(&pool, &batch).await;
    assert!(
        proxy.fired.load(Ordering::SeqCst),
        "the batch's answer was lost"
    );
    // The worker never heard the COMMIT's answer; each finalize's retry finds its claim gone
    // and the job row says its attempt completed, so each answers success.
    for finalized in &answers {
        assert!(finalized.is_ok(), "{finalized:?}");
    }
    assert_eq!(
        completing_transactions(&app, &claimed).await,
        (1, 3),
        "the batch's own commit is the one that stands"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        5,
        "one event for each of the five videos, none written twice"
    );
}

#[tokio::test]
async fn a_batch_cut_before_its_commit_reached_the_server_is_finalized_each_on_its_own() {
    let app = TestApp::spawn().await;
    let (claimed, pool, proxy) =
        three_claims_and_a_pool_failing_on_their_batch(&app, Failure::RequestCut).await;
    let batch: Vec<ReadyAttempt> = claimed.iter().map(ready).collect();
    let (riders, listeners) = riders(&[true, true, true]);

    let (answers, orphans) = finalize_riding(&pool, &batch, riders).await;
    assert!(proxy.fired.load(Ordering::SeqCst), "the batch was cut");
    for finalized in &answers {
        assert!(finalized.is_ok(), "{finalized:?}");
    }
    assert!(orphans.is_empty());
    // What reached the server of the batch (its uploaders' lock, its videos' update, its
    // events) rolled back with the connection, so each finalize committed on its own.
    assert_eq!(completing_transactions(&app, &claimed).await, (3, 3));
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready'")
            .await,
        5
    );
    // The claim ahead of the batch was cut with it or ran before the cut: either way every
    // job it took was heard by a slot, and no other job left the queue.
    let mut heard = Vec::new();
    for next in listeners.into_iter().flatten() {
        match next
            .heard(&tokio_util::sync::CancellationToken::new())
            .await
        {
            Heard::Job(job) => heard.push(job.job_id),
            Heard::QueueEmpty | Heard::Nothing | Heard::Failed(_) => {}
            Heard::AfterStop(job) => {
                panic!("nothing stopped, yet {} came after a stop", job.job_id)
            }
        }
    }
    let pending =
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE status = 'PENDING'");
    assert_eq!(
        pending.await + heard.len() as i64,
        2,
        "claimed and heard: {heard:?}"
    );
    for job in heard {
        assert_eq!(
            app.count(&format!(
                "SELECT count(*) AS n FROM video_encoding_jobs
                  WHERE id = {job} AND status = 'PROCESSING' AND claimed_by = '{RIDERS_NODE}'"
            ))
            .await,
            1
        );
    }
}
