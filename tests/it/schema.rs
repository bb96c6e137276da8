//! What the schema itself guarantees, whatever the code does.

use diesel_async::RunQueryDsl;

use crate::support::app::TestApp;

async fn exec(app: &TestApp, sql: &str) -> Result<usize, diesel::result::Error> {
    let mut conn = app.pool.get().await.unwrap();
    diesel::sql_query(sql).execute(&mut conn).await
}

#[tokio::test]
async fn the_attempt_budget_is_a_check_constraint() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let id = video["id"].as_str().unwrap();
    let set = |n: i32| {
        format!("UPDATE video_encoding_jobs SET attempt_count = {n} WHERE video_id = '{id}'")
    };
    assert_eq!(exec(&app, &set(3)).await.unwrap(), 1);
    let err = exec(&app, &set(4)).await.unwrap_err();
    assert!(err.to_string().contains("attempt_count"), "{err}");
    assert!(exec(&app, &set(-1)).await.is_err());
}

#[tokio::test]
async fn unknown_states_are_refused_by_the_schema() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let id = video["id"].as_str().unwrap();
    assert!(
        exec(
            &app,
            &format!("UPDATE videos SET status = 'done' WHERE id = '{id}'")
        )
        .await
        .is_err()
    );
    assert!(
        exec(
            &app,
            &format!("UPDATE video_encoding_jobs SET status = 'FAILED' WHERE video_id = '{id}'")
        )
        .await
        .is_err()
    );
    // PROCESSING without a claim token could never be fenced.
    assert!(
        exec(
            &app,
            &format!(
                "UPDATE video_encoding_jobs SET status = 'PROCESSING' WHERE video_id = '{id}'"
            )
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn states_nothing_writes_are_refused_by_the_schema() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let id = video["id"].as_str().unwrap();
    // A claimed job's video is reported `processing` by the API; its row stays `queued`.
    let processing = format!("UPDATE videos SET status = 'processing' WHERE id = '{id}'");
    assert!(exec(&app, &processing).await.is_err());
    // A contract goes from `pending` to `confirmed` in one step.
    let uploaded = format!(
        "UPDATE uploads SET state = 'uploaded' WHERE id = (SELECT upload_id FROM videos WHERE id = '{id}')"
    );
    assert!(exec(&app, &uploaded).await.is_err());
    // The states around them are still taken.
    let queued = format!("UPDATE videos SET status = 'queued' WHERE id = '{id}'");
    assert_eq!(exec(&app, &queued).await.unwrap(), 1);
}

#[tokio::test]
async fn the_claim_has_one_partial_index_over_both_claimable_states() {
    let app = TestApp::spawn().await;
    // Exactly one index can serve the claim (a partial index over PENDING rows); the other
    // partial index (the reaper's) excludes every claimable row by its predicate.
    let claim_capable = app
        .count(
            "SELECT count(*) AS n FROM pg_indexes WHERE tablename = 'video_encoding_jobs'
                AND indexdef LIKE '%WHERE%' AND indexdef LIKE '%PENDING%'",
        )
        .await;
    assert_eq!(claim_capable, 1);
    let claimable = app
        .count(
            "SELECT count(*) AS n FROM pg_indexes WHERE indexname = 'video_encoding_jobs_claimable_idx'
                AND indexdef LIKE '%(available_at, id)%' AND indexdef LIKE '%PENDING%' AND indexdef LIKE '%PROCESSING%'",
        )
        .await;
    assert_eq!(claimable, 1);
}

#[derive(diesel::QueryableByName)]
struct Updates {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    all: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    in_place: i64,
}

/// A finalize's READY update rewrites the video's row in place (a HOT update: no new entry in
/// any of the table's indexes), because no index covers a column it changes and the row's
/// page has room for the grown row. PostgreSQL counts both kinds per table.
#[tokio::test]
async fn a_videos_ready_update_is_done_in_place_without_touching_its_indexes() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    for _ in 0..5 {
        app.uploaded_video(&key).await;
    }
    {
        // Its own connection: a session's counts reach the statistics when it ends.
        let pool = vidq::db::connect(&app.db.url, 1).await.unwrap();
        let conn = pool.get().await.unwrap();
        let mut claims = Vec::new();
        while let Some(job) = vidq::db::jobs::claim(&conn, "node", 60.0).await.unwrap() {
            claims.push(vidq::queue::Claim::from(job));
        }
        drop(conn);
        assert_eq!(claims.len(), 5);
        for claim in &claims {
            let output = vidq::pipeline::AttemptOutput::placeholder(&claim.plan());
            vidq::queue::complete::finalize_ready(&pool, claim, &output)
                .await
                .unwrap();
        }
    }
    let mut counted = None;
    for _ in 0..100 {
        let mut conn = app.pool.get().await.unwrap();
        let updates: Updates = diesel::sql_query(
            "SELECT n_tup_upd AS all, n_tup_hot_upd AS in_place FROM pg_stat_user_tables
              WHERE relname = 'videos'",
        )
        .get_result(&mut conn)
        .await
        .unwrap();
        if updates.all >= 5 {
            counted = Some(updates);
            break;
        }
        drop(conn);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let counted = counted.expect("the finalizes' updates reached the statistics");
    assert_eq!(counted.all, 5, "one update per READY video");
    assert_eq!(
        counted.in_place, counted.all,
        "every READY update was done in place"
    );
}

#[tokio::test]
async fn the_queue_and_ledger_tables_are_vacuumed_after_one_or_two_percent_changed() {
    let app = TestApp::spawn().await;
    let with = |table: &str, setting: &str| {
        format!(
            "SELECT count(*) AS n FROM pg_class
              WHERE relname = '{table}' AND '{setting}' = ANY (reloptions)"
        )
    };
    for (table, setting) in [
        ("video_encoding_jobs", "autovacuum_vacuum_scale_factor=0.01"),
        ("video_encoding_jobs", "autovacuum_vacuum_cost_limit=2000"),
        ("notification_outbox", "autovacuum_vacuum_scale_factor=0.01"),
        ("event_deliveries", "autovacuum_vacuum_scale_factor=0.01"),
        (
            "job_attempt_log",
            "autovacuum_vacuum_insert_scale_factor=0.02",
        ),
        ("uploads", "autovacuum_vacuum_scale_factor=0.02"),
    ] {
        assert_eq!(
            app.count(&with(table, setting)).await,
            1,
            "{table}: {setting}"
        );
    }
}

#[tokio::test]
async fn a_state_or_code_the_code_does_not_know_is_an_error_when_read_never_a_default() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let id: vidq::domain::ids::VideoId = video["id"].as_str().unwrap().parse().unwrap();
    #[derive(diesel::QueryableByName)]
    struct Owner {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        owner_id: vidq::domain::ids::UserId,
    }
    let mut conn = app.pool.get().await.unwrap();
    let owner: Owner = diesel::sql_query(format!("SELECT owner_id FROM videos WHERE id = '{id}'"))
        .get_result(&mut conn)
        .await
        .unwrap();
    let read = vidq::db::videos::find_owned(&mut conn, owner.owner_id, id).await;
    assert!(
        read.unwrap().is_some(),
        "the video reads while its row is sound"
    );
    // The schema holds no list of failure codes: a code written by a newer (or broken)
    // build reaches the row, and reading it must fail rather than pass as another code.
    let set = format!(
        "UPDATE videos SET status = 'failed', error_code = 'no_such_code',
                error_message = 'x', failed_at = now() WHERE id = '{id}'"
    );
    assert_eq!(exec(&app, &set).await.unwrap(), 1);
    let err = vidq::db::videos::find_owned(&mut conn, owner.owner_id, id)
        .await
        .unwrap_err();
    let said = vidq::telemetry::error_chain(&err);
    assert!(
        said.contains("error_code") && said.contains("no_such_code"),
        "{said}"
    );
}
