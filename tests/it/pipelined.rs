//! Transactions sent as pipelines (`db::pipelined`): a statement that fails on the server
//! rolls back everything sent with it, a pipeline abandoned half way never hands its open
//! transaction to the pool's next user, and the finalize prepares nothing after its first run.

use std::time::Duration;

use diesel::QueryableByName;
use diesel::sql_types::BigInt;
use diesel_async::RunQueryDsl;
use vidq::db::pipelined::PipelinedTx;

use tokio_util::sync::CancellationToken;
use vidq::queue::claim_ahead::Heard;

use crate::support::app::TestApp;
use crate::support::db::{TestDb, UsersHeld};
use crate::support::queue;
use crate::support::wait::wait_for_lock_waits;

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Whether the session behind `conn` sits in an open transaction block: only there does
/// PostgreSQL accept a SAVEPOINT.
async fn in_open_transaction(conn: &mut diesel_async::AsyncPgConnection) -> bool {
    use diesel_async::SimpleAsyncConnection;
    conn.batch_execute("SAVEPOINT vidq_probe").await.is_ok()
}

#[tokio::test]
async fn a_statement_failing_on_the_server_rolls_back_what_was_sent_with_it_and_its_commit() {
    let db = TestDb::new().await;
    let pool = vidq::db::connect(&db.url, 1).await.unwrap();
    let mut conn = pool.get().await.unwrap();
    diesel::sql_query("CREATE TABLE pipelined (x int)")
        .execute(&mut conn)
        .await
        .unwrap();
    let tx = PipelinedTx::new(&mut conn);
    let mut c = tx.conn();
    let mut d = tx.conn();
    let result: Result<(), diesel::result::Error> = tx
        .run(async {
            futures_util::try_join!(
                diesel::sql_query("INSERT INTO pipelined VALUES (1)").execute(&mut c),
                diesel::sql_query("SELECT vidq_claim_held(0)").execute(&mut d),
            )
            .map(drop)
        })
        .await;
    let error = result.expect_err("the fence raised");
    assert!(
        error
            .to_string()
            .contains(vidq::db::jobs::CLAIM_LOST_MESSAGE),
        "{error}"
    );
    drop(tx);
    let left: Count = diesel::sql_query("SELECT count(*) AS n FROM pipelined")
        .get_result(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        left.n, 0,
        "the insert sent before the failure was rolled back"
    );
    assert!(!in_open_transaction(&mut conn).await);
}

#[tokio::test]
async fn a_pipeline_abandoned_after_its_begin_never_hands_an_open_transaction_to_the_pool() {
    let db = TestDb::new().await;
    let pool = vidq::db::connect(&db.url, 1).await.unwrap();
    {
        let mut conn = pool.get().await.unwrap();
        let tx = PipelinedTx::new(&mut conn);
        // BEGIN goes out; the statements never finish; the caller gives up (a cancelled task).
        let abandoned = tokio::time::timeout(
            Duration::from_millis(300),
            tx.begin_with(std::future::pending::<Result<(), diesel::result::Error>>()),
        )
        .await;
        assert!(abandoned.is_err());
    }
    let mut conn = pool.get().await.unwrap();
    assert!(
        !in_open_transaction(&mut conn).await,
        "the pool handed out the abandoned transaction"
    );
}

#[derive(QueryableByName)]
struct Statement {
    #[diesel(sql_type = diesel::sql_types::Text)]
    statement: String,
}

/// The statements the session behind `conn` keeps prepared, but for this query itself.
async fn kept_prepared(conn: &mut diesel_async::AsyncPgConnection) -> Vec<String> {
    let rows: Vec<Statement> = diesel::sql_query(
        "SELECT statement FROM pg_prepared_statements
          WHERE statement NOT LIKE '%pg_prepared_statements%' ORDER BY statement",
    )
    .load(conn)
    .await
    .unwrap();
    rows.into_iter().map(|row| row.statement).collect()
}

/// A statement that is not prepared once per connection costs the finalize a Parse and a plan
/// every time, and its pipeline a round trip: nothing after the Parse can go out until the
/// Parse is answered.
#[tokio::test]
async fn a_finalize_after_the_first_runs_only_statements_its_connection_already_prepared() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    app.uploaded_video(&key).await;
    let pool = vidq::db::connect(&app.db.url, 1).await.unwrap();
    let mut claims = Vec::new();
    {
        let conn = pool.get().await.unwrap();
        for _ in 0..2 {
            let job = vidq::db::jobs::claim(&conn, "node", 60.0)
                .await
                .unwrap()
                .expect("a job to claim");
            claims.push(vidq::queue::Claim::from(job));
        }
    }
    let finalize = async |claim: &vidq::queue::Claim| {
        let output = vidq::pipeline::AttemptOutput::placeholder(&claim.plan());
        vidq::queue::complete::finalize_ready(&pool, claim, &output)
            .await
            .unwrap();
        kept_prepared(&mut pool.get().await.unwrap()).await
    };
    let after_first = finalize(&claims[0]).await;
    assert!(
        after_first
            .iter()
            .any(|sql| sql.contains("UPDATE videos") && sql.contains("'ready'")),
        "the video's READY update is kept prepared: {after_first:#?}"
    );
    let after_second = finalize(&claims[1]).await;
    assert_eq!(
        after_first, after_second,
        "the second finalize prepared nothing new"
    );
}

#[derive(QueryableByName)]
struct JobRow {
    #[diesel(sql_type = diesel::sql_types::Text)]
    status: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Uuid>)]
    claim_token: Option<vidq::domain::ids::ClaimToken>,
}

async fn job_row(url: &str, job: i64) -> JobRow {
    let pool = vidq::db::connect(url, 1).await.unwrap();
    diesel::sql_query("SELECT status, claim_token FROM video_encoding_jobs WHERE id = $1")
        .bind::<BigInt, _>(job)
        .get_result(&mut pool.get().await.unwrap())
        .await
        .unwrap()
}

/// An app with two queued jobs, a pool of `connections` to its database, and a claim of
/// the first job.
async fn two_jobs_and_a_claim_of_one(
    connections: u32,
) -> (TestApp, vidq::db::DbPool, vidq::queue::Claim) {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    app.uploaded_video(&key).await;
    let pool = vidq::db::connect(&app.db.url, connections).await.unwrap();
    let claim = vidq::db::jobs::claim(&pool.get().await.unwrap(), "node", 60.0)
        .await
        .unwrap()
        .map(vidq::queue::Claim::from)
        .expect("a job to claim");
    (app, pool, claim)
}

/// A busy worker's slot makes one round trip per job: the claim of its next job rides in the
/// flight of the finalize, ahead of its `BEGIN`. Every answer the server sends here is held
/// 300 ms, so each round trip costs at least that: a claim sent on its own after the finalize
/// would take 600 ms.
#[tokio::test]
async fn a_finalize_carries_its_slots_next_claim_in_the_same_round_trip() {
    const DELAY: Duration = Duration::from_millis(300);
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    for _ in 0..3 {
        app.uploaded_video(&key).await;
    }
    let proxy = crate::support::proxy::Delayed::in_front_of(&app.db.url, DELAY).await;
    let pool = vidq::db::connect(&proxy.url_for(&app.db.url), 1)
        .await
        .unwrap();
    let first = vidq::db::jobs::claim(&pool.get().await.unwrap(), "node", 60.0)
        .await
        .unwrap()
        .map(vidq::queue::Claim::from)
        .expect("a job to claim");
    let finalize = async |claim: &vidq::queue::Claim| {
        let started = std::time::Instant::now();
        let (riders, mut listeners) = queue::riders(&[true]);
        let (answers, orphans) =
            queue::finalize_riding(&pool, &[queue::ready(claim)], riders).await;
        answers[0].as_ref().expect("the claim was ours");
        assert!(orphans.is_empty());
        let next = listeners.remove(0).expect("a rider");
        let next = match next.heard(&CancellationToken::new()).await {
            Heard::Job(next) => next,
            other => panic!("a job was waiting: {other:?}"),
        };
        (next, started.elapsed())
    };
    // The first one also prepares the statements on the connection.
    let (second, _) = finalize(&first).await;
    let (third, took) = finalize(&second).await;
    assert!(
        took < DELAY * 2,
        "the finalize and the next claim waited for one round trip, not two: {took:?}"
    );
    for done in [&first, &second] {
        assert_eq!(job_row(&app.db.url, done.job_id).await.status, "COMPLETED");
    }
    let claimed = job_row(&app.db.url, third.job_id).await;
    assert_eq!(claimed.status, "PROCESSING");
    assert_eq!(
        claimed.claim_token,
        Some(third.token),
        "the slot holds the new claim"
    );
}

/// A slot's next claim goes AHEAD of its finalize, and the slot has the claim's answer while
/// the finalize still runs. Here another transaction holds the uploader's row, so the
/// finalize waits at its first statement: the next job is handed over all the same, and the
/// finalize commits once the row is let go.
#[tokio::test]
async fn a_slots_next_claim_answers_while_its_finalize_still_waits_to_commit() {
    let (app, pool, first) = two_jobs_and_a_claim_of_one(2).await;
    let held = UsersHeld::hold(&app.db.url).await;
    let (riders, mut listeners) = queue::riders(&[true]);
    let finalizing = tokio::spawn({
        let (pool, attempt) = (pool.clone(), queue::ready(&first));
        async move { queue::finalize_riding(&pool, &[attempt], riders).await }
    });
    let next = tokio::time::timeout(
        Duration::from_secs(10),
        queue::claim_heard(listeners.remove(0).expect("a rider")),
    )
    .await
    .expect("the claim answers while the finalize waits for the uploader's row")
    .expect("the other job was waiting");
    assert_ne!(next.job_id, first.job_id);
    let claimed = job_row(&app.db.url, next.job_id).await;
    assert_eq!(claimed.status, "PROCESSING");
    assert_eq!(claimed.claim_token, Some(next.token));
    // Its transaction is blocked behind the held row (`pg_stat_activity` shows it waiting
    // for the lock), so it cannot have committed.
    wait_for_lock_waits(&app, 1).await;
    assert!(
        !finalizing.is_finished(),
        "the finalize waits for the uploader's row"
    );
    assert_eq!(
        job_row(&app.db.url, first.job_id).await.status,
        "PROCESSING"
    );
    held.let_go().await;
    let (answers, orphans) = finalizing.await.expect("the finalize's task answers");
    answers[0].as_ref().expect("the claim was ours");
    assert!(orphans.is_empty(), "the slot was listening");
    assert_eq!(job_row(&app.db.url, first.job_id).await.status, "COMPLETED");
}

/// The claim sent ahead of a finalize is a statement of its own and does not depend on it:
/// when the finalize's fence matches nothing and its transaction rolls back, the job the claim
/// took is still handed over, so it is run now rather than left PROCESSING until its lease
/// runs out, and the rolled-back finalize wrote nothing.
#[tokio::test]
async fn a_claim_sent_ahead_of_a_finalize_whose_fence_fails_is_still_handed_over() {
    let (app, pool, mut stale) = two_jobs_and_a_claim_of_one(1).await;
    stale.token = vidq::domain::ids::ClaimToken::new(); // a token the job never had
    let (riders, mut listeners) = queue::riders(&[true]);
    let (answers, orphans) = queue::finalize_riding(&pool, &[queue::ready(&stale)], riders).await;
    assert!(
        matches!(answers[0], Err(vidq::queue::JobError::ClaimLost)),
        "{:?}",
        answers[0]
    );
    assert!(orphans.is_empty());
    let next = queue::claim_heard(listeners.remove(0).expect("a rider"))
        .await
        .expect("the other job was waiting");
    assert_ne!(next.job_id, stale.job_id);
    let claimed = job_row(&app.db.url, next.job_id).await;
    assert_eq!(claimed.status, "PROCESSING");
    assert_eq!(claimed.claim_token, Some(next.token));
    assert_eq!(
        job_row(&app.db.url, stale.job_id).await.status,
        "PROCESSING",
        "the rolled-back finalize wrote nothing"
    );
    let video: Count =
        diesel::sql_query("SELECT count(*) AS n FROM videos WHERE id = $1 AND status = 'ready'")
            .bind::<diesel::sql_types::Uuid, _>(stale.video.0)
            .get_result(&mut pool.get().await.unwrap())
            .await
            .unwrap();
    assert_eq!(video.n, 0, "the video is not READY");
}

/// A confirm alone is one round trip: `BEGIN`, the uploader's lock, the contract's CAS, the
/// inserts and `COMMIT` go out together. Every answer the server sends here is held 300 ms,
/// so a confirm that waited for the CAS's answer before sending the rest would take 600.
/// A CAS that matches nothing (a repeat, a stranger's id) rolls back what was sent with it.
#[tokio::test]
async fn a_confirm_alone_commits_in_one_round_trip_and_a_fence_that_matches_nothing_rolls_it_back()
{
    use vidq::domain::ids::{UploadId, UserId};
    use vidq::domain::keys;
    const DELAY: Duration = Duration::from_millis(300);
    let app = TestApp::spawn().await;
    let (owner, key) = vidq::app::users::create_user(&app.pool, "alice")
        .await
        .unwrap();
    let mut uploads = Vec::new();
    for _ in 0..3 {
        let upload = app.create_upload(key.reveal(), 8).await;
        uploads.push(UploadId(
            upload["upload_id"].as_str().unwrap().parse().unwrap(),
        ));
    }
    let proxy = crate::support::proxy::Delayed::in_front_of(&app.db.url, DELAY).await;
    let pool = vidq::db::connect(&proxy.url_for(&app.db.url), 1)
        .await
        .unwrap();
    let mut conn = pool.get().await.unwrap();
    let mut took = Vec::new();
    for &upload in &uploads[..2] {
        let started = std::time::Instant::now();
        let accepted =
            vidq::app::uploads::accept(&mut conn, owner, upload, &keys::original(upload))
                .await
                .unwrap()
                .expect("the contract was open");
        took.push(started.elapsed());
        assert_eq!(accepted.video.upload_id, Some(upload));
    }
    // The first one also prepares the statements on the connection.
    assert!(
        took[1] < DELAY * 2,
        "the confirm waited for one round trip, not two: {took:?}"
    );
    let count = async |sql: &str| app.count(sql).await;
    // Videos, jobs and `video.accepted` events.
    let made = async || {
        (
            count("SELECT count(*) AS n FROM videos").await,
            count("SELECT count(*) AS n FROM video_encoding_jobs").await,
            count(
                "SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.accepted'",
            )
            .await,
        )
    };
    assert_eq!(made().await, (2, 2, 2));

    // A repeat: its fence matches nothing, and nothing sent with it stays.
    let again =
        vidq::app::uploads::accept(&mut conn, owner, uploads[0], &keys::original(uploads[0])).await;
    assert!(matches!(again, Ok(None)), "{again:?}");
    // A stranger's id on an open contract: the lock finds nobody, the CAS moves the contract,
    // and the video's insert fails on its foreign key, which rolls the CAS back.
    let stranger = UserId(uuid::Uuid::now_v7());
    let theirs =
        vidq::app::uploads::accept(&mut conn, stranger, uploads[2], &keys::original(uploads[2]))
            .await;
    assert!(
        matches!(theirs, Err(vidq::app::AppError::NotFound)),
        "{theirs:?}"
    );
    assert!(
        !in_open_transaction(&mut conn).await,
        "the failed confirms left no transaction open"
    );
    assert_eq!(made().await, (2, 2, 2), "the failed confirms wrote nothing");
    assert_eq!(
        count(&format!(
            "SELECT count(*) AS n FROM uploads WHERE id = '{}' AND state = 'pending'",
            uploads[2].0
        ))
        .await,
        1,
        "the stranger's confirm left the contract open"
    );
}
