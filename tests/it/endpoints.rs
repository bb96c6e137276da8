//! Webhook endpoints: registration (URL policy, secrets shown once, owners only), the
//! destination policy again at send time, an endpoint disabled under a waiting delivery, and
//! secret rotation with a resend.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::app::{TestApp, TestAppOptions};
use crate::support::receiver::Receiver;
use crate::support::relay::{
    RelayRun, deliveries, produce, register, register_for, relay_args, user_id,
};
use crate::support::wait::wait_for_count;

#[tokio::test]
async fn registration_checks_the_url_and_shows_the_secret_only_once() {
    let strict = TestApp::spawn_with(TestAppOptions {
        allow_private_webhooks: false,
        ..TestAppOptions::default()
    })
    .await;
    let key = strict.create_user("alice").await;
    for url in [
        "http://127.0.0.1:9/hooks",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.7/",
        "http://[::1]/",
        "http://localhost:8080/",
    ] {
        let response = strict
            .post(&key, "/v1/webhooks", &json!({ "url": url }))
            .await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{url}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_webhook_url", "{url}");
    }
    for url in [
        "ftp://example.com/",
        "not a url",
        "https://user:pw@example.com/",
    ] {
        let response = strict
            .post(&key, "/v1/webhooks", &json!({ "url": url }))
            .await;
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY, "{url}");
    }
    let response = strict
        .post(
            &key,
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1/", "event_types": ["video.exploded"] }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        strict
            .count("SELECT count(*) AS n FROM webhook_endpoints")
            .await,
        0
    );

    // With private destinations allowed (the default of these tests).
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let stranger = app.create_user("mallory").await;
    let created = register_for(&app, &key, "http://127.0.0.1:9/hooks", &["video.ready"]).await;
    let secret = created["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(created["status"], "active");
    assert_eq!(created["event_types"], json!(["video.ready"]));
    let id = created["id"].as_str().unwrap();

    let listed: Value = app.get(&key, "/v1/webhooks").await.json().await.unwrap();
    assert_eq!(listed["webhooks"].as_array().unwrap().len(), 1);
    assert!(listed["webhooks"][0].get("secret").is_none());
    let shown = app.get(&key, &format!("/v1/webhooks/{id}")).await;
    assert_eq!(shown.status(), StatusCode::OK);
    assert!(shown.json::<Value>().await.unwrap().get("secret").is_none());
    for path in [
        format!("/v1/webhooks/{id}"),
        format!("/v1/webhooks/{id}/deliveries"),
    ] {
        assert_eq!(
            app.get(&stranger, &path).await.status(),
            StatusCode::NOT_FOUND
        );
    }
    let stolen = app
        .post(
            &stranger,
            &format!("/v1/webhooks/{id}/rotate-secret"),
            &json!({}),
        )
        .await;
    assert_eq!(stolen.status(), StatusCode::NOT_FOUND);

    let rotated = app
        .post(
            &key,
            &format!("/v1/webhooks/{id}/rotate-secret"),
            &json!({}),
        )
        .await;
    assert_eq!(rotated.status(), StatusCode::OK);
    let rotated: Value = rotated.json().await.unwrap();
    assert_ne!(rotated["secret"], created["secret"]);
    assert!(rotated["previous_secret_expires_at"].is_string());

    assert_eq!(
        app.delete(&stranger, &format!("/v1/webhooks/{id}"))
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.delete(&key, &format!("/v1/webhooks/{id}"))
            .await
            .status(),
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        app.get(&key, &format!("/v1/webhooks/{id}")).await.status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn the_relay_refuses_private_destinations_unless_allowed() {
    // The API here allows them (so they can be registered); the relay does not.
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    let port = receiver.url.rsplit(':').next().unwrap().to_owned();
    let literal = register(&app, &key, &receiver.url).await;
    let named = register(&app, &key, &format!("http://localhost:{port}")).await;
    let mut args = relay_args("0");
    args.webhooks.allow_private = false;
    let relay = RelayRun::start(&app, &args).await;
    produce(&app, owner, 1).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM event_deliveries WHERE status = 'exhausted'",
        2,
        Duration::from_secs(20),
    )
    .await;
    relay.stop().await;
    assert!(
        receiver.arrivals().is_empty(),
        "nothing reached the loopback receiver"
    );
    for endpoint in [literal, named] {
        let log = deliveries(&app, &key, &endpoint).await;
        let error = log["deliveries"][0]["tries"][0]["error"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(error.contains("private address"), "{error}");
    }
}

#[tokio::test]
async fn a_delivery_whose_endpoint_was_disabled_meanwhile_is_discarded_unsent() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    let endpoint = register(&app, &key, &receiver.url).await;
    produce(&app, owner, 1).await;
    // Routed while the endpoint was live...
    let mut conn = app.pool.get().await.unwrap();
    vidq::db::deliveries::route(&mut conn, 10, false)
        .await
        .unwrap();
    // ...then a 410 on another delivery disabled it (as if this one was in flight elsewhere).
    assert_eq!(
        app.count("WITH d AS (UPDATE webhook_endpoints SET disabled_at = now(), disabled_reason = '410' RETURNING 1) SELECT count(*) AS n FROM d")
            .await,
        1
    );
    let relay = RelayRun::start(&app, &relay_args("0,50ms")).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM event_deliveries WHERE status = 'discarded'",
        1,
        Duration::from_secs(20),
    )
    .await;
    relay.stop().await;
    assert!(receiver.arrivals().is_empty());
    let log = deliveries(&app, &key, &endpoint).await;
    assert_eq!(
        log["deliveries"][0]["last_error"],
        "not sent: the endpoint was disabled"
    );
}

#[tokio::test]
async fn during_a_rotation_both_secrets_sign_and_a_resend_carries_the_same_id() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let stranger = app.create_user("mallory").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    let endpoint = register(&app, &key, &receiver.url).await;
    let id = endpoint["id"].as_str().unwrap();
    let old = endpoint["secret"].as_str().unwrap().to_owned();
    let rotated: Value = app
        .post(
            &key,
            &format!("/v1/webhooks/{id}/rotate-secret"),
            &json!({}),
        )
        .await
        .json()
        .await
        .unwrap();
    let new = rotated["secret"].as_str().unwrap().to_owned();
    receiver.trust(&old);
    receiver.trust(&new);
    let relay = RelayRun::start(&app, &relay_args("0,100ms")).await;
    let event = produce(&app, owner, 1).await.remove(0);
    receiver
        .wait_for_delivered(1, Duration::from_secs(20))
        .await;
    let first = receiver.arrivals().remove(0);
    assert_eq!(first.signatures, 2);
    assert_eq!(
        first.verified,
        [true, true],
        "each secret verifies on its own"
    );

    // Resend: the same event id again, through the same signing.
    let resent = app
        .post(
            &key,
            &format!("/v1/webhooks/{id}/resend/{event}"),
            &json!({}),
        )
        .await;
    assert_eq!(resent.status(), StatusCode::ACCEPTED);
    receiver
        .wait_for_delivered(2, Duration::from_secs(20))
        .await;
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals[1].id, event);
    assert_eq!(
        arrivals[1].body, first.body,
        "byte-for-byte the same envelope"
    );
    let stolen = app
        .post(
            &stranger,
            &format!("/v1/webhooks/{id}/resend/{event}"),
            &json!({}),
        )
        .await;
    assert_eq!(stolen.status(), StatusCode::NOT_FOUND);
    let unknown = app
        .post(
            &key,
            &format!("/v1/webhooks/{id}/resend/{}", Uuid::now_v7()),
            &json!({}),
        )
        .await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    relay.stop().await;
}
