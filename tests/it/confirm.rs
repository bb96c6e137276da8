//! `POST /v1/uploads/{id}/confirm`: the transaction that turns bytes in S3 into a queued
//! video (invariant I1), and its idempotence under repeats and races.

use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{TestApp, assert_error};

async fn rows(app: &TestApp) -> (i64, i64, i64) {
    (
        app.count("SELECT count(*) AS n FROM videos").await,
        app.count("SELECT count(*) AS n FROM video_encoding_jobs")
            .await,
        app.count("SELECT count(*) AS n FROM notification_outbox")
            .await,
    )
}

#[tokio::test]
async fn confirm_before_the_put_is_409_and_the_upload_stays_confirmable() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let upload = app.create_upload(&key, 10).await;
    let id = upload["upload_id"].as_str().unwrap();
    assert_error(
        app.confirm(&key, id).await,
        StatusCode::CONFLICT,
        "upload_incomplete",
    )
    .await;
    assert_eq!(rows(&app).await, (0, 0, 0));

    assert!(app.put_to(&upload, vec![1; 10]).await.status().is_success());
    assert_eq!(app.confirm(&key, id).await.status(), StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_size_mismatch_is_409_and_a_correct_reupload_then_confirms() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let upload = app.create_upload(&key, 100).await;
    let id = upload["upload_id"].as_str().unwrap();
    // The presigned URL signs the declared length, so S3 itself refuses another size...
    let refused = app.put_to_with_length(&upload, vec![1; 99]).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(
        app.storage
            .head(&format!("originals/{id}"))
            .await
            .unwrap()
            .is_none()
    );
    // ...and should an object of another size arrive anyway (a store that does not check
    // signed lengths), confirm refuses it.
    app.storage
        .put_bytes(&format!("originals/{id}"), vec![1; 99], "video/mp4")
        .await
        .unwrap();
    let body = assert_error(
        app.confirm(&key, id).await,
        StatusCode::CONFLICT,
        "size_mismatch",
    )
    .await;
    assert!(
        body["error"]["message"].as_str().unwrap().contains("99"),
        "{body}"
    );
    assert_eq!(rows(&app).await, (0, 0, 0));
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM uploads WHERE id = '{id}' AND state = 'pending'"
        ))
        .await,
        1
    );

    assert!(
        app.put_to(&upload, vec![1; 100])
            .await
            .status()
            .is_success()
    );
    assert_eq!(app.confirm(&key, id).await.status(), StatusCode::ACCEPTED);
}

#[tokio::test]
async fn first_confirm_is_202_and_repeats_are_200_with_the_same_video() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let upload = app.create_upload(&key, 10).await;
    let id = upload["upload_id"].as_str().unwrap();
    assert!(app.put_to(&upload, vec![1; 10]).await.status().is_success());

    let first = app.confirm(&key, id).await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["status"], "queued");
    assert_eq!(first["upload_id"], id);
    assert_eq!(first["attempts"], 0);
    assert!(first["playback"].is_null() && first["error"].is_null());

    for _ in 0..3 {
        let again = app.confirm(&key, id).await;
        assert_eq!(again.status(), StatusCode::OK);
        let again: Value = again.json().await.unwrap();
        assert_eq!(again["id"], first["id"]);
    }
    assert_eq!(rows(&app).await, (1, 1, 1));
}

#[tokio::test]
async fn twenty_concurrent_confirms_create_exactly_one_video_job_and_event() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let upload = app.create_upload(&key, 10).await;
    let id = upload["upload_id"].as_str().unwrap().to_owned();
    assert!(app.put_to(&upload, vec![1; 10]).await.status().is_success());

    let responses = futures_util::future::join_all((0..20).map(|_| async {
        let response = app.confirm(&key, &id).await;
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        (status, body["id"].as_str().unwrap().to_owned())
    }))
    .await;

    let created = responses
        .iter()
        .filter(|(s, _)| *s == StatusCode::ACCEPTED)
        .count();
    let repeated = responses
        .iter()
        .filter(|(s, _)| *s == StatusCode::OK)
        .count();
    assert_eq!((created, repeated), (1, 19), "{responses:?}");
    assert!(
        responses.iter().all(|(_, v)| *v == responses[0].1),
        "every answer names one video"
    );
    assert_eq!(rows(&app).await, (1, 1, 1));
}

#[derive(QueryableByName, Debug)]
struct Xmins {
    #[diesel(sql_type = diesel::sql_types::Text)]
    upload: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    video: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    job: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    event: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    event_xid: String,
}

#[tokio::test]
async fn the_upload_video_job_and_event_of_one_confirm_commit_in_one_transaction() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let mut conn = app.pool.get().await.unwrap();
    let x: Xmins = diesel::sql_query(
        "SELECT u.xmin::text AS upload, v.xmin::text AS video, j.xmin::text AS job, o.xmin::text AS event,
                (o.xid::text::numeric % 4294967296)::text AS event_xid
           FROM videos v
           JOIN uploads u ON u.id = v.upload_id
           JOIN video_encoding_jobs j ON j.video_id = v.id
           JOIN notification_outbox o ON o.video_id = v.id
          WHERE v.id = $1",
    )
    .bind::<diesel::sql_types::Uuid, _>(video["id"].as_str().unwrap().parse::<uuid::Uuid>().unwrap())
    .get_result(&mut conn)
    .await
    .unwrap();
    assert_eq!(x.video, x.job, "{x:?}");
    assert_eq!(x.video, x.event, "{x:?}");
    assert_eq!(
        x.video, x.upload,
        "the upload's CAS is part of the same transaction: {x:?}"
    );
    assert_eq!(
        x.video, x.event_xid,
        "the outbox records its own transaction id: {x:?}"
    );
}

#[derive(QueryableByName, Debug)]
struct QueuedJob {
    #[diesel(sql_type = diesel::sql_types::Text)]
    status: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    attempt_count: i32,
    #[diesel(sql_type = diesel::sql_types::Text)]
    original_s3_key: String,
    #[diesel(sql_type = diesel::sql_types::Jsonb)]
    payload: Value,
    #[diesel(sql_type = diesel::sql_types::Text)]
    event_id: String,
}

#[tokio::test]
async fn confirm_queues_a_pending_job_and_a_video_accepted_event() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = app.uploaded_video(&key).await;
    let mut conn = app.pool.get().await.unwrap();
    let job: QueuedJob = diesel::sql_query(
        "SELECT j.status, j.attempt_count, j.original_s3_key, o.payload, o.event_id::text AS event_id
           FROM video_encoding_jobs j JOIN notification_outbox o ON o.video_id = j.video_id
          WHERE j.video_id = $1 AND o.event_type = 'video.accepted'",
    )
    .bind::<diesel::sql_types::Uuid, _>(video["id"].as_str().unwrap().parse::<uuid::Uuid>().unwrap())
    .get_result(&mut conn)
    .await
    .unwrap();
    assert_eq!(job.status, "PENDING");
    assert_eq!(job.attempt_count, 0);
    assert_eq!(
        job.original_s3_key,
        format!("originals/{}", video["upload_id"].as_str().unwrap())
    );
    assert_eq!(job.payload["type"], "video.accepted");
    assert_eq!(job.payload["id"], job.event_id.as_str());
    assert_eq!(job.payload["video_id"], video["id"]);
    let event_id: uuid::Uuid = job.event_id.parse().unwrap();
    assert_eq!(event_id.get_version_num(), 7);
}

#[tokio::test]
async fn a_stranger_cannot_confirm_and_learns_nothing() {
    let app = TestApp::spawn().await;
    let alice = app.create_user("alice").await;
    let mallory = app.create_user("mallory").await;
    let upload = app.create_upload(&alice, 10).await;
    let id = upload["upload_id"].as_str().unwrap();
    assert!(app.put_to(&upload, vec![1; 10]).await.status().is_success());

    assert_error(
        app.confirm(&mallory, id).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_eq!(rows(&app).await, (0, 0, 0));
    let unknown = uuid::Uuid::now_v7().to_string();
    assert_error(
        app.confirm(&alice, &unknown).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_error(
        app.confirm(&alice, "not-a-uuid").await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    // A key nobody holds is told so, whether the id exists, is someone's or is malformed
    // (the key and the contract are looked up in one statement; a miss asks which failed).
    for target in [id, unknown.as_str(), "not-a-uuid"] {
        assert_error(
            app.confirm("vq_nobody_holds_this_key", target).await,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        )
        .await;
    }
    assert_eq!(rows(&app).await, (0, 0, 0));
    assert_eq!(app.confirm(&alice, id).await.status(), StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_rejected_upload_cannot_be_confirmed() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let upload = app.create_upload(&key, 10).await;
    let id = upload["upload_id"].as_str().unwrap();
    assert!(app.put_to(&upload, vec![1; 10]).await.status().is_success());
    app.count(&format!(
        "WITH r AS (UPDATE uploads SET state = 'rejected', reject_reason = 'spool_missing' WHERE id = '{id}' RETURNING 1)
         SELECT count(*) AS n FROM r"
    ))
    .await;
    assert_error(
        app.confirm(&key, id).await,
        StatusCode::CONFLICT,
        "upload_closed",
    )
    .await;
    assert_eq!(rows(&app).await, (0, 0, 0));
}

#[tokio::test]
async fn confirm_wakes_listening_workers_on_commit() {
    use diesel_async::AsyncConnection;
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let mut listener = diesel_async::AsyncPgConnection::establish(&app.db.url)
        .await
        .unwrap();
    diesel::sql_query("LISTEN vidq_jobs")
        .execute(&mut listener)
        .await
        .unwrap();
    let mut notifications = Box::pin(listener.notifications_stream());
    app.uploaded_video(&key).await;
    let note = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        futures_util::StreamExt::next(&mut notifications),
    )
    .await
    .expect("a NOTIFY arrives")
    .unwrap()
    .unwrap();
    assert_eq!(note.channel, "vidq_jobs");
}

#[tokio::test]
async fn producers_wake_relays_only_while_one_is_waiting() {
    use diesel_async::AsyncConnection;
    use vidq::db::wake::{Announce, announce, withdraw};
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let url = vidq::db::pool::with_default_user(&app.db.url).unwrap();
    let mut listener = diesel_async::AsyncPgConnection::establish(&url)
        .await
        .unwrap();
    diesel::sql_query("LISTEN vidq_events")
        .execute(&mut listener)
        .await
        .unwrap();
    let mut notifications = Box::pin(listener.notifications_stream());
    let within = async |stream: &mut std::pin::Pin<Box<_>>, ms: u64| {
        let note: Option<Option<diesel::QueryResult<diesel::pg::PgNotification>>> =
            tokio::time::timeout(
                std::time::Duration::from_millis(ms),
                futures_util::StreamExt::next(stream),
            )
            .await
            .ok();
        note.flatten().map(|n| n.unwrap().channel)
    };

    // Nobody waits: the confirm commits its event without a NOTIFY (none is needed).
    app.uploaded_video(&key).await;
    assert_eq!(within(&mut notifications, 300).await, None);

    // A relay announces it is waiting: now the confirm and the finalize wake it.
    let mut waiter = diesel_async::AsyncPgConnection::establish(&url)
        .await
        .unwrap();
    assert_eq!(announce(&mut waiter).await.unwrap(), Announce::Announced);
    let mut other = diesel_async::AsyncPgConnection::establish(&url)
        .await
        .unwrap();
    assert_eq!(announce(&mut other).await.unwrap(), Announce::Covered);
    let video = app.uploaded_video(&key).await;
    assert_eq!(
        within(&mut notifications, 5000).await.as_deref(),
        Some("vidq_events")
    );
    let mut conn = app.pool.get().await.unwrap();
    // The earlier video's job is first in line; finish it, then this one.
    for _ in 0..2 {
        let claim = vidq::db::jobs::claim(&conn, "n", 30.0)
            .await
            .unwrap()
            .unwrap();
        let claim = vidq::queue::Claim::from(claim);
        let plan = claim.plan();
        vidq::queue::complete::finalize_ready(
            &app.pool,
            &claim,
            &vidq::pipeline::AttemptOutput::placeholder(&plan),
        )
        .await
        .unwrap();
        assert_eq!(
            within(&mut notifications, 5000).await.as_deref(),
            Some("vidq_events")
        );
    }
    // The wake-up follows the commit: the event is already visible to a reader.
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM notification_outbox WHERE event_type = 'video.ready' AND video_id = '{}'",
            video["id"].as_str().unwrap()
        ))
        .await,
        1
    );

    // Withdrawn: quiet again. And a producer committing without NOTIFY keeps a relay from
    // announcing until it has committed, so the relay's re-check cannot miss its event.
    withdraw(&mut waiter).await.unwrap();
    diesel::sql_query("BEGIN")
        .execute(&mut *conn)
        .await
        .unwrap();
    let owner: vidq::domain::ids::UserId = {
        use diesel::QueryDsl;
        vidq::db::schema::users::table
            .select(vidq::db::schema::users::id)
            .first(&mut *conn)
            .await
            .unwrap()
    };
    let event = vidq::domain::event::Event::video_accepted(
        vidq::domain::ids::VideoId::new(),
        vidq::domain::ids::UploadId::new(),
        chrono::Utc::now(),
    );
    vidq::db::deliveries::outbox::insert(&conn, owner, &event)
        .await
        .unwrap();
    assert_eq!(announce(&mut waiter).await.unwrap(), Announce::Busy);
    diesel::sql_query("COMMIT")
        .execute(&mut *conn)
        .await
        .unwrap();
    assert_eq!(within(&mut notifications, 300).await, None);
    assert_eq!(announce(&mut waiter).await.unwrap(), Announce::Announced);
    withdraw(&mut waiter).await.unwrap();

    // Another waiter (an API process with feed readers, say) takes over the lock: NOTIFY again.
    assert_eq!(announce(&mut other).await.unwrap(), Announce::Announced);
    app.uploaded_video(&key).await;
    assert_eq!(
        within(&mut notifications, 5000).await.as_deref(),
        Some("vidq_events")
    );
}
