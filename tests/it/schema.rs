//! What the schema itself guarantees, whatever the code does.

use diesel_async::RunQueryDsl;

use crate::harness::TestApp;

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
