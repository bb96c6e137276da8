//! `/healthz` and `/readyz`.

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::TestApp;

#[tokio::test]
async fn healthz_answers_without_credentials() {
    let app = TestApp::spawn().await;
    let response = app.http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn readyz_is_ready_when_database_and_bucket_answer() {
    let app = TestApp::spawn().await;
    let response = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["database"], "ok");
    assert_eq!(body["storage"], "ok");
}

#[tokio::test]
async fn readyz_stays_ready_without_the_bucket_and_names_storage_unavailable() {
    let mut app = TestApp::spawn().await;
    app.s3.take().unwrap().stop().await;
    let response = app.http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    assert_eq!(body["database"], "ok");
    assert_eq!(
        body["storage"], "unavailable",
        "no endpoint or bucket details: {body}"
    );
}

#[tokio::test]
async fn readyz_is_unavailable_without_the_bucket_when_storage_is_required() {
    let mut app = TestApp::spawn().await;
    app.s3.take().unwrap().stop().await;
    let mut ctx = app.ctx.clone();
    ctx.ready_requires_storage = true;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    tokio::spawn(vidq::http::serve(listener, ctx, shutdown).unwrap());
    let response = app.http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "unavailable");
    assert_eq!(body["database"], "ok");
    assert_eq!(body["storage"], "unavailable");
}

#[tokio::test]
async fn unknown_routes_are_json_404s() {
    let app = TestApp::spawn().await;
    let response = app.http.get(app.url("/nope")).send().await.unwrap();
    crate::support::app::assert_error(response, StatusCode::NOT_FOUND, "not_found").await;
}
