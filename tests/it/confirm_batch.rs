//! Confirms committed together (`app::confirm_batch`, `app::uploads::accept_all`): each
//! confirm of a batch still makes exactly its own video, job and event in one transaction
//! (I1), gets the answer it would get alone, and one that fails costs the others nothing.

use diesel::QueryableByName;
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use reqwest::StatusCode;
use serde_json::Value;
use uuid::Uuid;
use vidq::app::confirm_batch::{Acceptance, BatchSettings, ConfirmBatcher};
use vidq::app::{AppError, UploadError};
use vidq::domain::ids::{UploadId, UserId};
use vidq::domain::upload::UploadState;

use crate::support::app::{TestApp, TestAppOptions};
use crate::support::db::plans_of;
use crate::support::wait::wait_for_lock_waits;

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    id: Uuid,
}

async fn user_id(app: &TestApp, name: &str) -> UserId {
    let mut conn = app.pool.get().await.unwrap();
    let row: Id = diesel::sql_query("SELECT id FROM users WHERE name = $1")
        .bind::<diesel::sql_types::Text, _>(name)
        .get_result(&mut conn)
        .await
        .unwrap();
    UserId(row.id)
}

/// A pending contract of `owner`'s (its bytes are not needed: the batch runs after the HEAD).
async fn contract(app: &TestApp, key: &str, owner: UserId) -> Acceptance {
    let upload = app.create_upload(key, 10).await;
    let id: Uuid = upload["upload_id"].as_str().unwrap().parse().unwrap();
    Acceptance {
        owner,
        upload_id: UploadId(id),
        object_key: format!("originals/{id}"),
    }
}

#[derive(QueryableByName, Debug, PartialEq)]
struct Made {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    upload_id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    owner_id: Uuid,
    #[diesel(sql_type = diesel::sql_types::Text)]
    upload_state: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    job_key: String,
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    event_owner: Uuid,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    stamped_with_video_time: bool,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    one_transaction: bool,
}

/// Each video with its contract, job and event, and whether all four rows share the
/// video's transaction.
async fn made(app: &TestApp) -> Vec<Made> {
    let mut conn = app.pool.get().await.unwrap();
    diesel::sql_query(
        "SELECT v.upload_id, v.owner_id, u.state AS upload_state, j.original_s3_key AS job_key,
                o.owner_id AS event_owner,
                o.payload->>'occurred_at'
                  = to_char(v.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
                  AS stamped_with_video_time,
                v.xmin::text = u.xmin::text AND v.xmin::text = j.xmin::text
                  AND v.xmin::text = o.xmin::text AS one_transaction
           FROM videos v
           JOIN uploads u ON u.id = v.upload_id
           JOIN video_encoding_jobs j ON j.video_id = v.id
           JOIN notification_outbox o ON o.video_id = v.id AND o.event_type = 'video.accepted'
          ORDER BY v.upload_id",
    )
    .load(&mut conn)
    .await
    .unwrap()
}

async fn jobs_and_events(app: &TestApp) -> (i64, i64) {
    (
        app.count("SELECT count(*) AS n FROM video_encoding_jobs")
            .await,
        app.count("SELECT count(*) AS n FROM notification_outbox")
            .await,
    )
}

#[tokio::test]
async fn each_confirm_of_a_batch_gets_the_answer_it_would_get_alone() {
    let app = TestApp::spawn().await;
    let alice_key = app.create_user("alice").await;
    let bob_key = app.create_user("bob").await;
    let carol_key = app.create_user("carol").await;
    let (alice, bob, carol) = (
        user_id(&app, "alice").await,
        user_id(&app, "bob").await,
        user_id(&app, "carol").await,
    );
    let first = contract(&app, &alice_key, alice).await;
    let second = contract(&app, &alice_key, alice).await;
    let bobs = contract(&app, &bob_key, bob).await;
    let expired = contract(&app, &alice_key, alice).await;
    app.count(&format!(
        "WITH e AS (UPDATE uploads SET state = 'expired' WHERE id = '{}' RETURNING 1)
         SELECT count(*) AS n FROM e",
        expired.upload_id.0
    ))
    .await;
    let earlier = app.uploaded_video(&alice_key).await;
    let confirmed = Acceptance {
        owner: alice,
        upload_id: UploadId(earlier["upload_id"].as_str().unwrap().parse().unwrap()),
        object_key: String::new(),
    };
    // Carol is deleted after her confirm passed its checks: her contract went with her.
    let carols = contract(&app, &carol_key, carol).await;
    app.count(&format!(
        "WITH d AS (DELETE FROM users WHERE id = '{}' RETURNING 1) SELECT count(*) AS n FROM d",
        carol.0
    ))
    .await;

    let batch = [
        first.clone(),
        bobs.clone(),
        expired,
        first.clone(), // the same contract twice: one video, for the first
        confirmed,
        carols,
        second.clone(),
    ];
    let mut conn = app.pool.get().await.unwrap();
    let answers = vidq::app::uploads::accept_all(&mut conn, &batch)
        .await
        .expect("the batch commits");
    drop(conn);

    assert_eq!(answers.len(), batch.len());
    let created: Vec<Option<UploadId>> = answers
        .iter()
        .map(|a| match a {
            Ok(Some(accepted)) => accepted.video.upload_id,
            _ => None,
        })
        .collect();
    assert_eq!(
        created,
        [
            Some(first.upload_id),
            Some(bobs.upload_id),
            None,
            None,
            None,
            None,
            Some(second.upload_id)
        ]
    );
    assert!(
        matches!(
            answers[2],
            Err(AppError::Upload(UploadError::UploadClosed {
                state: UploadState::Expired
            }))
        ),
        "{:?}",
        answers[2]
    );
    assert!(matches!(answers[3], Ok(None)), "{:?}", answers[3]);
    assert!(matches!(answers[4], Ok(None)), "{:?}", answers[4]);
    assert!(
        matches!(answers[5], Err(AppError::NotFound)),
        "{:?}",
        answers[5]
    );
    for answer in [&answers[0], &answers[1], &answers[6]] {
        let accepted = answer.as_ref().unwrap().as_ref().unwrap();
        assert_eq!(accepted.video.status, "queued");
        assert!(accepted.job_id > 0);
    }

    let rows = made(&app).await;
    assert_eq!(rows.len(), 4, "the earlier video and the batch's three");
    for (acceptance, owner) in [(&first, alice), (&second, alice), (&bobs, bob)] {
        let row = rows
            .iter()
            .find(|r| r.upload_id == acceptance.upload_id.0)
            .expect("a video for each moved contract");
        assert_eq!(row.owner_id, owner.0);
        assert_eq!(row.event_owner, owner.0);
        assert_eq!(row.upload_state, "confirmed");
        assert_eq!(row.job_key, acceptance.object_key);
        assert!(
            row.stamped_with_video_time,
            "the event's time is its video's"
        );
        assert!(
            row.one_transaction,
            "contract, video, job and event commit together"
        );
    }
    assert_eq!(jobs_and_events(&app).await, (4, 4));
}

/// Breaks a contract's confirm: a video already names it while it is still pending, so its
/// video's insert fails on `videos.upload_id`'s uniqueness.
async fn break_contract(app: &TestApp, acceptance: &Acceptance) {
    app.count(&format!(
        "WITH v AS (INSERT INTO videos (id, owner_id, upload_id) VALUES (gen_random_uuid(), '{}', '{}') RETURNING 1)
         SELECT count(*) AS n FROM v",
        acceptance.owner.0, acceptance.upload_id.0
    ))
    .await;
}

#[tokio::test]
async fn a_batch_that_fails_as_a_whole_writes_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let alice = user_id(&app, "alice").await;
    let good = contract(&app, &key, alice).await;
    let bad = contract(&app, &key, alice).await;
    break_contract(&app, &bad).await;

    let mut conn = app.pool.get().await.unwrap();
    let failed = vidq::app::uploads::accept_all(&mut conn, &[good.clone(), bad]).await;
    assert!(matches!(failed, Err(AppError::Database(_))), "{failed:?}");
    drop(conn);
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM uploads WHERE id = '{}' AND state = 'pending'",
            good.upload_id.0
        ))
        .await,
        1,
        "the good contract's CAS was rolled back with the rest"
    );
    assert_eq!(jobs_and_events(&app).await, (0, 0));
}

/// Waits until `n` confirms wait in `batcher`'s queue, not yet taken by a committer (the
/// batcher's `Debug` shows how many are queued).
async fn wait_until_queued(batcher: &ConfirmBatcher, n: usize) {
    let queued = format!("queued: {n},");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !format!("{batcher:?}").contains(&queued) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {n} queued: {batcher:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_confirm_that_fails_inside_a_batch_costs_the_others_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let alice = user_id(&app, "alice").await;
    let mut contracts = Vec::new();
    for _ in 0..5 {
        contracts.push(contract(&app, &key, alice).await);
    }
    break_contract(&app, &contracts[3]).await;
    let batcher = ConfirmBatcher::start(
        app.pool.clone(),
        BatchSettings {
            max: 64,
            committers: 1,
        },
    );

    // Alice's row is held FOR UPDATE, so the committer's first batch (the first confirm)
    // waits on it while the other four queue behind; they then go as one batch, which the
    // broken confirm fails as a whole.
    let mut holder = app.pool.get().await.unwrap();
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM users WHERE id = '{}' FOR UPDATE",
            alice.0
        ))
        .await
        .unwrap();
    let first = tokio::spawn({
        let (batcher, acceptance) = (batcher.clone(), contracts[0].clone());
        async move { batcher.accept(acceptance).await }
    });
    // The first confirm's transaction waits for Alice's row...
    wait_for_lock_waits(&app, 1).await;
    let rest: Vec<_> = contracts[1..]
        .iter()
        .map(|acceptance| {
            let (batcher, acceptance) = (batcher.clone(), acceptance.clone());
            tokio::spawn(async move { batcher.accept(acceptance).await })
        })
        .collect();
    // ...and the other four wait in the batcher's queue behind it.
    wait_until_queued(&batcher, 4).await;
    holder.batch_execute("COMMIT").await.unwrap();

    let mut answers = vec![first.await.unwrap()];
    for task in rest {
        answers.push(task.await.unwrap());
    }
    for (i, answer) in answers.iter().enumerate() {
        if i == 3 {
            assert!(matches!(answer, Err(AppError::Database(_))), "{answer:?}");
        } else {
            let accepted = answer.as_ref().unwrap().as_ref().expect("a new video");
            assert_eq!(accepted.video.upload_id, Some(contracts[i].upload_id));
        }
    }
    let rows = made(&app).await;
    assert_eq!(rows.len(), 4, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.one_transaction && r.upload_state == "confirmed")
    );
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM uploads WHERE id = '{}' AND state = 'pending'",
            contracts[3].upload_id.0
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn concurrent_confirms_and_repeats_through_the_api_each_name_one_video() {
    let app = TestApp::spawn_with(TestAppOptions {
        confirm_batches: (64, 1),
        ..Default::default()
    })
    .await;
    let key = app.create_user("alice").await;
    let batched = || async {
        crate::support::metrics::sample(
            &crate::support::metrics::scrape(&app).await,
            "vidq_confirm_batch_size_sum",
        )
        .unwrap_or(0.0)
    };
    let before = batched().await;
    let mut ids = Vec::new();
    for _ in 0..24 {
        let upload = app.create_upload(&key, 10).await;
        assert!(app.put_to(&upload, vec![1; 10]).await.status().is_success());
        ids.push(upload["upload_id"].as_str().unwrap().to_owned());
    }
    // Each contract confirmed twice at once, all 48 together.
    let answers = futures_util::future::join_all(ids.iter().chain(&ids).map(|id| async {
        let response = app.confirm(&key, id).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        (id.clone(), status, body["id"].as_str().unwrap().to_owned())
    }))
    .await;
    for id in &ids {
        let mine: Vec<_> = answers.iter().filter(|(of, ..)| of == id).collect();
        let mut statuses: Vec<u16> = mine.iter().map(|(_, s, _)| s.as_u16()).collect();
        statuses.sort_unstable();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::ACCEPTED].map(|s| s.as_u16())
        );
        assert_eq!(mine[0].2, mine[1].2, "both answers name one video");
    }
    let rows = made(&app).await;
    assert_eq!(rows.len(), ids.len());
    assert!(rows.iter().all(|r| r.one_transaction));
    // Every confirm that got past its HEAD went through a committer (the families are the
    // process's, which other tests share: they only add).
    assert!(batched().await - before >= ids.len() as f64);
}

/// A batch's statements run from their generic plans (`db::prepared`): over array parameters
/// PostgreSQL would otherwise plan them again for every batch.
#[tokio::test]
async fn a_batchs_statements_are_not_planned_again_for_every_batch() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let alice = user_id(&app, "alice").await;
    let mut conn = vidq::db::pool::dedicated(&app.db.url).await.unwrap();
    for _ in 0..8 {
        let batch = [
            contract(&app, &key, alice).await,
            contract(&app, &key, alice).await,
        ];
        let answers = vidq::app::uploads::accept_all(&mut conn, &batch)
            .await
            .expect("the batch commits");
        assert!(answers.iter().all(|a| matches!(a, Ok(Some(_)))));
    }
    let plans = plans_of(&mut conn, r"unnest\(|= ANY\(\$1\)").await;
    assert!(plans.statements >= 4, "{} statements", plans.statements);
    assert_eq!(plans.custom_plans, 0, "statements planned for their values");
}
