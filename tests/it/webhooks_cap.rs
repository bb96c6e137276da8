//! The per-uploader webhook cap holds under concurrent registrations: the count and the
//! insert happen in one transaction under the uploader's row lock.

use diesel_async::SimpleAsyncConnection;
use reqwest::StatusCode;
use serde_json::{Value, json};
use vidq::app::webhooks::MAX_ENDPOINTS;

use crate::support::app::TestApp;

#[tokio::test]
async fn concurrent_registrations_at_the_cap_let_exactly_one_in() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    for n in 1..MAX_ENDPOINTS {
        crate::support::relay::register(&app, &key, &format!("http://127.0.0.1:9/hooks/{n}")).await;
    }
    // Each insert takes a while, which widens the window between a registration's count and
    // its commit: registrations that counted apart would all see 19 and all fit.
    let mut conn = app.pool.get().await.unwrap();
    conn.batch_execute(
        "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(0.1); RETURN NEW; END $$;
         CREATE TRIGGER slow_insert BEFORE INSERT ON webhook_endpoints
             FOR EACH ROW EXECUTE FUNCTION slow_insert();",
    )
    .await
    .unwrap();
    drop(conn);
    let bodies: Vec<Value> = (0..20)
        .map(|n| json!({ "url": format!("http://127.0.0.1:9/race/{n}") }))
        .collect();
    let answers = futures_util::future::join_all(
        bodies
            .iter()
            .map(|body| app.post(&key, "/v1/webhooks", body)),
    )
    .await;
    let mut created = 0;
    for answer in answers {
        match answer.status() {
            StatusCode::CREATED => created += 1,
            StatusCode::BAD_REQUEST => {
                let body: Value = answer.json().await.unwrap();
                assert_eq!(body["error"]["code"], "bad_request", "{body}");
                assert!(
                    body["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("at most {MAX_ENDPOINTS} webhooks")),
                    "{body}"
                );
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(created, 1, "one registration fits under the cap");
    assert_eq!(
        app.count("SELECT count(*) AS n FROM webhook_endpoints")
            .await,
        MAX_ENDPOINTS
    );
}
