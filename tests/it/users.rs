//! Deleting a user: everything they own goes, in the fixed lock order, without deadlocking
//! against their in-flight requests.

use reqwest::StatusCode;

use crate::support::app::TestApp;

async fn owned_rows(app: &TestApp) -> [i64; 4] {
    [
        app.count("SELECT count(*) AS n FROM uploads").await,
        app.count("SELECT count(*) AS n FROM videos").await,
        app.count("SELECT count(*) AS n FROM video_encoding_jobs")
            .await,
        app.count("SELECT count(*) AS n FROM notification_outbox")
            .await,
    ]
}

#[tokio::test]
async fn deleting_a_user_cascades_to_everything_they_own_and_nothing_else() {
    let app = TestApp::spawn().await;
    let alice = app.create_user("alice").await;
    let bob = app.create_user("bob").await;
    let alices = [
        app.uploaded_video(&alice).await,
        app.uploaded_video(&alice).await,
    ];
    let bobs = app.uploaded_video(&bob).await;
    let alice_output = format!("videos/{}/a1/video.mp4", alices[0]["id"].as_str().unwrap());
    app.storage
        .put_bytes(&alice_output, b"x".to_vec(), "video/mp4")
        .await
        .unwrap();
    assert_eq!(owned_rows(&app).await, [3, 3, 3, 3]);

    let deleted = vidq::app::users::delete_user(&app.ctx, "alice")
        .await
        .unwrap();
    assert_eq!(deleted.videos, 2);
    assert_eq!(deleted.objects, 3, "two originals and one output");
    assert_eq!(
        owned_rows(&app).await,
        [1, 1, 1, 1],
        "only bob's rows remain"
    );
    assert_eq!(app.count("SELECT count(*) AS n FROM users").await, 1);
    assert!(app.storage.head(&alice_output).await.unwrap().is_none());
    for video in &alices {
        let original = format!("originals/{}", video["upload_id"].as_str().unwrap());
        assert!(app.storage.head(&original).await.unwrap().is_none());
    }
    let bobs_original = format!("originals/{}", bobs["upload_id"].as_str().unwrap());
    assert!(app.storage.head(&bobs_original).await.unwrap().is_some());

    assert_eq!(
        app.get(&alice, "/v1/videos").await.status(),
        StatusCode::UNAUTHORIZED,
        "the key died with the user"
    );
    assert!(matches!(
        vidq::app::users::delete_user(&app.ctx, "alice").await,
        Err(vidq::app::AppError::NotFound)
    ));
}

#[tokio::test]
async fn deleting_a_user_during_their_confirms_neither_deadlocks_nor_orphans_rows() {
    let app = TestApp::spawn().await;
    for round in 0..3 {
        let name = format!("alice{round}");
        let key = app.create_user(&name).await;
        let mut uploads = Vec::new();
        for _ in 0..6 {
            let upload = app.create_upload(&key, 10).await;
            assert!(app.put_to(&upload, vec![1; 10]).await.status().is_success());
            uploads.push(upload["upload_id"].as_str().unwrap().to_owned());
        }
        let confirms =
            futures_util::future::join_all(uploads.iter().map(|id| app.confirm(&key, id)));
        let delete = vidq::app::users::delete_user(&app.ctx, &name);
        let (responses, deleted) = tokio::join!(confirms, delete);
        deleted.expect("user deletion never deadlocks or fails");
        for response in responses {
            let status = response.status();
            assert!(
                matches!(
                    status,
                    StatusCode::ACCEPTED | StatusCode::NOT_FOUND | StatusCode::UNAUTHORIZED
                ),
                "a confirm racing the deletion either won or found the user gone, got {status}"
            );
        }
        assert_eq!(owned_rows(&app).await, [0, 0, 0, 0], "round {round}");
        assert!(
            app.storage
                .list_prefix("originals/")
                .await
                .unwrap()
                .is_empty()
        );
    }
}
