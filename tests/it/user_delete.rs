//! Deleting a user who owns thousands of videos: it happens in pages, each its own
//! transaction, so the rows one transaction locks (and the keys held in memory) stay bounded.

use diesel_async::SimpleAsyncConnection;
use vidq::app::users::{DELETE_PAGE, delete_user};

use crate::support::app::TestApp;
use crate::support::relay::user_id;

const VIDEOS: i64 = 3_000;

/// Gives `owner` `n` confirmed uploads, each with a queued video, its job and one event, in
/// four statements.
async fn bulk_videos(app: &TestApp, owner: vidq::domain::ids::UserId, n: i64) {
    let inserted = app
        .count(&format!(
            "WITH u AS (
                 INSERT INTO uploads (id, owner_id, object_key, filename, content_type,
                                      declared_size, state, expires_at)
                 SELECT g.id, '{owner}', 'originals/' || g.id, 'clip.mp4', 'video/mp4', 10,
                        'confirmed', now() + interval '1 day'
                   FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, {n})) g
                 RETURNING id)
             SELECT count(*) AS n FROM u"
        ))
        .await;
    assert_eq!(inserted, n);
    for sql in [
        format!(
            "WITH v AS (INSERT INTO videos (id, owner_id, upload_id)
                        SELECT gen_random_uuid(), owner_id, id FROM uploads
                         WHERE owner_id = '{owner}' RETURNING 1)
             SELECT count(*) AS n FROM v"
        ),
        format!(
            "WITH j AS (INSERT INTO video_encoding_jobs (video_id, original_s3_key)
                        SELECT v.id, u.object_key FROM videos v JOIN uploads u ON u.id = v.upload_id
                         WHERE v.owner_id = '{owner}' RETURNING 1)
             SELECT count(*) AS n FROM j"
        ),
        format!(
            "WITH o AS (INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
                        SELECT gen_random_uuid(), 'video.accepted', owner_id, id, '{{}}'::jsonb
                          FROM videos WHERE owner_id = '{owner}' RETURNING 1)
             SELECT count(*) AS n FROM o"
        ),
    ] {
        assert_eq!(app.count(&sql).await, n, "{sql}");
    }
}

/// Records, for every deleted row of the watched tables, the transaction that deleted it.
async fn watch_deletions(app: &TestApp) {
    let mut conn = app.pool.get().await.unwrap();
    conn.batch_execute(
        "CREATE TABLE deletion_log (tbl text NOT NULL, xid xid8 NOT NULL);
         CREATE FUNCTION log_deletion() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO deletion_log VALUES (TG_TABLE_NAME, pg_current_xact_id());
             RETURN OLD;
         END $$;
         CREATE TRIGGER log_videos AFTER DELETE ON videos
             FOR EACH ROW EXECUTE FUNCTION log_deletion();
         CREATE TRIGGER log_jobs AFTER DELETE ON video_encoding_jobs
             FOR EACH ROW EXECUTE FUNCTION log_deletion();
         CREATE TRIGGER log_outbox AFTER DELETE ON notification_outbox
             FOR EACH ROW EXECUTE FUNCTION log_deletion();",
    )
    .await
    .unwrap();
}

/// The most rows of `table` one transaction deleted, and in how many transactions.
async fn per_transaction(app: &TestApp, table: &str) -> (i64, i64) {
    let most = app
        .count(&format!(
            "SELECT coalesce(max(n), 0) AS n FROM (SELECT count(*) AS n FROM deletion_log
              WHERE tbl = '{table}' GROUP BY xid) t"
        ))
        .await;
    let transactions = app
        .count(&format!(
            "SELECT count(DISTINCT xid) AS n FROM deletion_log WHERE tbl = '{table}'"
        ))
        .await;
    (most, transactions)
}

#[tokio::test]
async fn a_user_with_thousands_of_videos_is_deleted_in_bounded_pages() {
    let app = TestApp::spawn().await;
    app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let bobs = app.uploaded_video(&bob).await;
    let alice = user_id(&app, "alice").await;
    bulk_videos(&app, alice, VIDEOS).await;
    watch_deletions(&app).await;

    let deleted = delete_user(&app.ctx, "alice").await.unwrap();

    assert_eq!(deleted.videos, VIDEOS as usize);
    let pages = (VIDEOS + DELETE_PAGE - 1) / DELETE_PAGE;
    assert_eq!(
        deleted.transactions as i64,
        2 * pages + 1,
        "a transaction per page of uploads, per page of events, and the last for the user"
    );
    for table in ["videos", "video_encoding_jobs", "notification_outbox"] {
        let (most, transactions) = per_transaction(&app, table).await;
        assert!(
            most <= DELETE_PAGE,
            "one transaction deleted {most} rows of {table}; a page is {DELETE_PAGE}"
        );
        assert_eq!(transactions, pages, "{table}");
    }
    for table in [
        "uploads",
        "videos",
        "video_encoding_jobs",
        "notification_outbox",
    ] {
        assert_eq!(
            app.count(&format!("SELECT count(*) AS n FROM {table}"))
                .await,
            1,
            "only bob's row of {table} is left"
        );
    }
    assert_eq!(
        app.count("SELECT count(*) AS n FROM users WHERE name = 'alice'")
            .await,
        0
    );
    let shown = app.video(&bob, &bobs["id"].as_str().unwrap()).await;
    assert_eq!(shown["id"], bobs["id"]);
}

#[tokio::test]
async fn a_deletion_cut_short_leaves_a_user_without_a_key_that_a_second_run_finishes() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    app.uploaded_video(&key).await;
    // The first step of a deletion that then died: the key is revoked, the rows are there.
    let mut conn = app.pool.get().await.unwrap();
    vidq::db::users::revoke_key_by_name(&mut conn, "alice", &[7; 32])
        .await
        .unwrap()
        .unwrap();
    drop(conn);
    assert_eq!(
        app.get(&key, "/v1/videos").await.status(),
        reqwest::StatusCode::UNAUTHORIZED,
        "nothing new arrives from a user being deleted"
    );
    let deleted = delete_user(&app.ctx, "alice").await.unwrap();
    assert_eq!(deleted.videos, 1);
    assert_eq!(app.count("SELECT count(*) AS n FROM users").await, 0);
    assert_eq!(app.count("SELECT count(*) AS n FROM videos").await, 0);
}
