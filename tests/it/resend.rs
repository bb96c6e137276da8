//! Resending an event: a resend joins a delivery of that event still on its way instead of
//! adding one, only subscribed types can be resent, and each endpoint has a limit per minute.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::app::{TestApp, assert_error};
use crate::support::receiver::Receiver;
use crate::support::relay::{RelayRun, produce, register, register_for, relay_args, user_id};
use crate::support::wait::wait_for_count;
use vidq::app::webhooks::MAX_RESENDS_PER_MINUTE;

async fn resend(app: &TestApp, key: &str, endpoint: &str, event: &str) -> reqwest::Response {
    app.post(
        key,
        &format!("/v1/webhooks/{endpoint}/resend/{event}"),
        &json!({}),
    )
    .await
}

const UNFINISHED: &str =
    "SELECT count(*) AS n FROM event_deliveries WHERE status IN ('pending', 'sending')";

#[tokio::test]
async fn many_resends_of_a_pending_event_make_one_delivery() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    let endpoint = register(&app, &key, &receiver.url).await;
    let id = endpoint["id"].as_str().unwrap().to_owned();
    receiver.trust(endpoint["secret"].as_str().unwrap());
    let event = produce(&app, owner, 1).await.remove(0);
    // Routed, not yet sent: its delivery waits for a relay.
    let mut conn = app.pool.get().await.unwrap();
    vidq::db::deliveries::route(&mut conn, 10, false)
        .await
        .unwrap();
    drop(conn);

    // A burst from one client, 64 at a time (the per-address connection cap is above that).
    use futures_util::StreamExt;
    let answers: Vec<_> =
        futures_util::stream::iter((0..300).map(|_| resend(&app, &key, &id, &event)))
            .buffer_unordered(64)
            .collect()
            .await;
    let mut joined = Vec::new();
    for answer in answers {
        assert_eq!(answer.status(), StatusCode::ACCEPTED);
        joined.push(answer.json::<Value>().await.unwrap()["delivery_id"].clone());
    }
    assert!(
        joined.iter().all(|d| *d == joined[0]),
        "every resend joined the waiting delivery"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM event_deliveries")
            .await,
        1
    );

    let relay = RelayRun::start(&app, &relay_args("0,100ms")).await;
    receiver
        .wait_for_delivered(1, Duration::from_secs(20))
        .await;
    // Every delivery there is has settled: nothing is left that could still arrive.
    wait_for_count(&app, UNFINISHED, 0, Duration::from_secs(20)).await;
    relay.stop().await;
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 1, "one POST for 300 resends");
    assert_eq!(arrivals[0].id, event);
    assert_eq!(arrivals[0].verified, [true]);
}

#[tokio::test]
async fn a_resend_of_a_type_the_endpoint_does_not_take_is_refused() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let endpoint = register_for(&app, &key, "http://127.0.0.1:9/hooks", &["video.ready"]).await;
    let accepted = produce(&app, owner, 1).await.remove(0);
    assert_error(
        resend(&app, &key, endpoint["id"].as_str().unwrap(), &accepted).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "event_type_not_subscribed",
    )
    .await;
    assert_eq!(
        app.count("SELECT count(*) AS n FROM event_deliveries")
            .await,
        0
    );
}

#[tokio::test]
async fn resends_over_the_per_endpoint_limit_answer_429() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let events = produce(&app, owner, MAX_RESENDS_PER_MINUTE as usize + 1).await;
    // Registered after the events: only resends can bring them to it.
    let endpoint = register(&app, &key, "http://127.0.0.1:9/hooks").await;
    let id = endpoint["id"].as_str().unwrap();
    let (last, within) = events.split_last().unwrap();
    for event in within {
        assert_eq!(
            resend(&app, &key, id, event).await.status(),
            StatusCode::ACCEPTED
        );
    }
    let refused = resend(&app, &key, id, last).await;
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("60"),
        "told to wait out the window"
    );
    assert_error(refused, StatusCode::TOO_MANY_REQUESTS, "too_many_resends").await;
    // Joining a delivery still waiting adds nothing, so the limit does not refuse it.
    assert_eq!(
        resend(&app, &key, id, &within[0]).await.status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM event_deliveries")
            .await,
        MAX_RESENDS_PER_MINUTE
    );
    // Another endpoint has its own budget.
    let other = register(&app, &key, "http://127.0.0.1:9/other").await;
    assert_eq!(
        resend(&app, &key, other["id"].as_str().unwrap(), last)
            .await
            .status(),
        StatusCode::ACCEPTED
    );
}
