//! How an upload ends other than complete: terminated by its owner (and not by a stranger,
//! nor once complete), or expired (410, and the sweeper removes its spool file).

use reqwest::StatusCode;

use crate::support::app::{TestApp, assert_error};
use crate::support::sweeper::woken_sweeper;
use crate::support::tus::{
    bytes, create, offset_of, patch, spool_file, tus, upload_id, wait_for_state,
};
use crate::support::wait::wait_gone;

#[tokio::test]
async fn termination_drops_the_upload_and_its_bytes_and_a_stranger_sees_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let mallory = app.create_user("mallory").await;
    let file = bytes(10_000);
    let url = create(&app, &key, file.len()).await;
    let id = upload_id(&url);
    patch(&app, &key, &url, 0, &file[..5_000], None).await;

    // A stranger's requests read as unknown ids and change nothing.
    for method in [reqwest::Method::HEAD, reqwest::Method::DELETE] {
        let r = tus(&app, &mallory, method, &url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }
    let r = patch(&app, &mallory, &url, 5_000, &file[5_000..], None).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_error(
        app.get(&mallory, &format!("/v1/uploads/{id}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    assert_eq!(offset_of(&app, &key, &url).await, 5_000);

    let r = tus(&app, &key, reqwest::Method::DELETE, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    assert!(!spool_file(&app, &id).exists());
    let r = tus(&app, &key, reqwest::Method::HEAD, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    // A single PUT never starts over bytes that came through tus.
    let url2 = create(&app, &key, file.len()).await;
    patch(&app, &key, &url2, 0, &file[..100], None).await;
    let r = app
        .http
        .put(app.url(&format!("/v1/uploads/{}/content", upload_id(&url2))))
        .bearer_auth(&key)
        .body(file.clone())
        .send()
        .await
        .unwrap();
    assert_error(r, StatusCode::CONFLICT, "wrong_upload_method").await;
    assert_eq!(offset_of(&app, &key, &url2).await, 100);

    // A complete upload is the ledger's now: it cannot be terminated.
    let url = create(&app, &key, file.len()).await;
    patch(&app, &key, &url, 0, &file, None).await;
    let r = tus(&app, &key, reqwest::Method::DELETE, &url)
        .send()
        .await
        .unwrap();
    assert_error(r, StatusCode::CONFLICT, "upload_complete").await;
    // A presigned upload is no tus resource.
    let presigned = app.create_upload(&key, 10).await;
    let r = tus(
        &app,
        &key,
        reqwest::Method::HEAD,
        &app.url(&format!(
            "/v1/tus/{}",
            presigned["upload_id"].as_str().unwrap()
        )),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_expired_upload_answers_410_and_the_sweeper_removes_its_spool_file() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let file = bytes(10_000);
    let url = create(&app, &key, file.len()).await;
    let id = upload_id(&url);
    patch(&app, &key, &url, 0, &file[..4_000], None).await;
    app.count(&format!(
        "WITH x AS (UPDATE uploads SET expires_at = now() - interval '1 second'
                     WHERE id = '{id}' RETURNING 1) SELECT count(*) AS n FROM x"
    ))
    .await;
    let r = patch(&app, &key, &url, 4_000, &file[4_000..], None).await;
    assert_error(r, StatusCode::GONE, "upload_gone").await;
    let r = tus(&app, &key, reqwest::Method::HEAD, &url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::GONE);

    app.start_sweeper(app.storage.clone(), woken_sweeper())
        .await;
    let status = wait_for_state(&app, &key, &id, "expired").await;
    assert_eq!(status["received_bytes"], 4_000);
    // The row is expired first, then its file is removed: give the sweeper that moment.
    wait_gone(&spool_file(&app, &id)).await;
    assert!(!spool_file(&app, &id).exists());
    assert!(
        app.storage
            .head(&format!("originals/{id}"))
            .await
            .unwrap()
            .is_none()
    );
}
