//! The relay against a real receiver: signed deliveries verified by an independent
//! implementation, the same id on every try, the retry schedule, `Retry-After`, timeouts,
//! `410 Gone`, exhaustion, secret rotation, resend, competing relays, and no event for a
//! finalize that rolled back. The relay's own rounds (pruning, wake-ups, what routing reads)
//! are in `rounds`; endpoint registration and the destination policy are in `endpoints.rs`;
//! the helpers every relay test uses are in `support::relay`.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::app::TestApp;
use crate::support::receiver::{Receiver, Reply, delivered};
use crate::support::relay::{RelayRun, deliveries, produce, register, relay_args, user_id};
use crate::support::wait::wait_for_count;

mod rounds;

/// Per event id, how many times it arrived.
fn tally(arrivals: &[&crate::support::receiver::Arrival]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for a in arrivals {
        *counts.entry(a.id.clone()).or_default() += 1;
    }
    counts
}

#[tokio::test]
async fn every_event_arrives_signed_and_keeps_its_id_across_retries() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let receiver = Receiver::start();
    let endpoint = register(&app, &key, &receiver.url).await;
    receiver.trust(endpoint["secret"].as_str().unwrap());
    // The first try of every event fails; the second succeeds.
    receiver.script(|_, nth| {
        if nth == 1 {
            Reply::Status(500)
        } else {
            Reply::Status(200)
        }
    });
    let relay = RelayRun::start(&app, &relay_args("0,100ms,100ms")).await;

    let mut videos = Vec::new();
    for _ in 0..5 {
        videos.push(
            app.uploaded_video(&key).await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    receiver
        .wait_for_delivered(5, Duration::from_secs(20))
        .await;
    relay.stop().await;

    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 10, "one failed and one good try per event");
    for arrival in &arrivals {
        assert_eq!(arrival.verified, [true], "signature of {}", arrival.id);
        assert_eq!(
            arrival.body["id"],
            arrival.id.as_str(),
            "webhook-id is the event id"
        );
        assert_eq!(arrival.body["type"], "video.accepted");
    }
    let counts = tally(&arrivals.iter().collect::<Vec<_>>());
    assert_eq!(counts.len(), 5);
    assert!(counts.values().all(|&n| n == 2), "{counts:?}");
    let mut announced: Vec<String> = delivered(&arrivals)
        .iter()
        .map(|a| a.body["video_id"].as_str().unwrap().to_owned())
        .collect();
    announced.sort();
    videos.sort();
    assert_eq!(announced, videos);

    // The attempt log tells the story of each delivery.
    let log = deliveries(&app, &key, &endpoint).await;
    assert_eq!(log["deliveries"].as_array().unwrap().len(), 5);
    for delivery in log["deliveries"].as_array().unwrap() {
        assert_eq!(delivery["status"], "delivered");
        let codes: Vec<i64> = delivery["tries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["response_status"].as_i64().unwrap())
            .collect();
        assert_eq!(codes, [500, 200]);
    }
}

#[tokio::test]
async fn retry_after_is_honoured_and_a_slow_receiver_times_out() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    let endpoint = register(&app, &key, &receiver.url).await;
    let ids = produce(&app, owner, 2).await;
    let (asks_to_wait, too_slow) = (ids[0].clone(), ids[1].clone());
    receiver.script(move |id, nth| match (id == asks_to_wait, nth) {
        (true, 1) => Reply::RetryAfter(503, "2"),
        (false, 1) => Reply::Slow(Duration::from_secs(3)),
        _ => Reply::Status(204),
    });
    let mut args = relay_args("0,50ms,50ms");
    args.webhook_timeout_ms = 300;
    let relay = RelayRun::start(&app, &args).await;
    receiver
        .wait_for_delivered(2, Duration::from_secs(20))
        .await;
    relay.stop().await;

    let arrivals = receiver.arrivals();
    let tries = |id: &str| -> Vec<_> { arrivals.iter().filter(|a| a.id == id).collect() };
    let waited = tries(&ids[0]);
    assert_eq!(waited.len(), 2);
    let gap = waited[1].at - waited[0].at;
    assert!(
        gap >= Duration::from_millis(1900),
        "the schedule said 50 ms but Retry-After said 2 s; the relay waited {gap:?}"
    );
    assert_eq!(tries(&too_slow).len(), 2);

    let log = deliveries(&app, &key, &endpoint).await;
    let slow = log["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["event_id"] == ids[1].as_str())
        .unwrap();
    let first = &slow["tries"][0];
    assert!(first["response_status"].is_null());
    assert_eq!(first["error"], "no answer within 300 ms");
    assert_eq!(slow["tries"][1]["response_status"], 204);
}

#[tokio::test]
async fn a_delivery_is_exhausted_after_its_last_try_and_gone_disables_the_endpoint() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let failing = Receiver::start();
    failing.script(|_, _| Reply::Status(500));
    let gone = Receiver::start();
    gone.script(|_, _| Reply::Status(410));
    let failing_endpoint = register(&app, &key, &failing.url).await;
    let gone_endpoint = register(&app, &key, &gone.url).await;
    let relay = RelayRun::start(&app, &relay_args("0,50ms,50ms")).await;

    let first = produce(&app, owner, 1).await.remove(0);
    failing
        .wait_until(Duration::from_secs(20), |a| a.len() >= 3)
        .await;
    gone.wait_until(Duration::from_secs(20), |a| !a.is_empty())
        .await;
    // Settled rows are never claimed again: a fourth try or a resend to the gone endpoint
    // could only have happened before this.
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM event_deliveries WHERE status IN ('exhausted', 'discarded')",
        2,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(failing.arrivals().len(), 3, "three tries, then exhausted");
    assert_eq!(
        gone.arrivals().len(),
        1,
        "one try, then the endpoint is off"
    );

    let log = deliveries(&app, &key, &failing_endpoint).await;
    assert_eq!(log["deliveries"][0]["status"], "exhausted");
    assert_eq!(log["deliveries"][0]["attempts"], 3);
    assert_eq!(log["deliveries"][0]["tries"].as_array().unwrap().len(), 3);
    let log = deliveries(&app, &key, &gone_endpoint).await;
    assert_eq!(log["deliveries"][0]["status"], "discarded");
    let gone_id = gone_endpoint["id"].as_str().unwrap();
    let shown: Value = app
        .get(&key, &format!("/v1/webhooks/{gone_id}"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(shown["status"], "disabled");
    assert!(shown["disabled_reason"].as_str().unwrap().contains("410"));

    // Later events still go to the live endpoint, never to the disabled one: once the
    // live endpoint's delivery of the second event is exhausted, that event was routed, and
    // routing gave the disabled endpoint no delivery that could still be sent.
    let second = produce(&app, owner, 1).await.remove(0);
    wait_for_count(
        &app,
        &format!(
            "SELECT count(*) AS n FROM event_deliveries d JOIN notification_outbox o
              ON o.id = d.outbox_id WHERE o.event_id = '{second}' AND d.status = 'exhausted'"
        ),
        1,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) AS n FROM event_deliveries d JOIN notification_outbox o
              ON o.id = d.outbox_id WHERE o.event_id = '{second}'"
        ))
        .await,
        1,
        "only the live endpoint got a delivery"
    );
    assert_eq!(failing.arrivals().len(), 6);
    assert_eq!(gone.arrivals().len(), 1);
    let resend = app
        .post(
            &key,
            &format!("/v1/webhooks/{gone_id}/resend/{first}"),
            &json!({}),
        )
        .await;
    assert_eq!(resend.status(), StatusCode::CONFLICT);
    let body: Value = resend.json().await.unwrap();
    assert_eq!(body["error"]["code"], "endpoint_disabled");
    relay.stop().await;
}

#[tokio::test]
async fn two_relays_deliver_each_event_exactly_once() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    register(&app, &key, &receiver.url).await;
    let mut args = relay_args("0,100ms");
    args.relay_lease_secs = 30;
    args.batch = 8;
    let mut other = args.clone();
    args.relay_id = Some("relay-a".into());
    other.relay_id = Some("relay-b".into());
    let (a, b) = (
        RelayRun::start(&app, &args).await,
        RelayRun::start(&app, &other).await,
    );
    let mut ids = Vec::new();
    let producers: Vec<_> = (0..4).map(|_| produce(&app, owner, 50)).collect();
    for batch in futures_util::future::join_all(producers).await {
        ids.extend(batch);
    }
    // Every delivery settled, then both relays stopped (finishing any try in flight): a
    // second copy of any event would have arrived by now.
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM event_deliveries WHERE status = 'delivered'",
        200,
        Duration::from_secs(30),
    )
    .await;
    a.stop().await;
    b.stop().await;
    let arrivals = receiver.arrivals();
    let counts = tally(&arrivals.iter().collect::<Vec<_>>());
    assert_eq!(counts.len(), 200);
    assert!(
        ids.iter().all(|id| counts.get(id) == Some(&1)),
        "every event exactly once"
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM event_deliveries WHERE status = 'delivered' AND attempt_count = 1")
            .await,
        200
    );
    assert_eq!(
        app.count("SELECT count(DISTINCT relay_id) AS n FROM delivery_attempts")
            .await,
        2,
        "both relays took part"
    );
}

#[tokio::test]
async fn a_finalize_that_rolled_back_sends_nothing() {
    use vidq::queue::complete;
    use vidq::queue::{Claim, JobError};
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let receiver = Receiver::start();
    register(&app, &key, &receiver.url).await;
    let relay = RelayRun::start(&app, &relay_args("0,100ms")).await;
    app.uploaded_video(&key).await;
    let zombie = crate::support::queue::claim(&app, "zombie", 30.0)
        .await
        .unwrap();
    crate::support::queue::expire_lease(&app, &zombie).await;
    let winner = crate::support::queue::claim(&app, "winner", 30.0)
        .await
        .unwrap();
    let plan = |c: &Claim| c.plan();
    let late = complete::finalize_ready(
        &app.pool,
        &zombie,
        &crate::support::scripted::output(&plan(&zombie)),
    )
    .await;
    assert!(matches!(late, Err(JobError::ClaimLost)), "{late:?}");
    complete::finalize_ready(
        &app.pool,
        &winner,
        &crate::support::scripted::output(&plan(&winner)),
    )
    .await
    .unwrap();

    receiver
        .wait_for_delivered(2, Duration::from_secs(20))
        .await;
    // Every event routed and every delivery settled: nothing is left that could arrive late.
    wait_for_count(
        &app,
        "SELECT (SELECT count(*) FROM notification_outbox WHERE routed_at IS NULL)
              + (SELECT count(*) FROM event_deliveries WHERE status IN ('pending', 'sending')) AS n",
        0,
        Duration::from_secs(20),
    )
    .await;
    relay.stop().await;
    assert_eq!(
        app.count("SELECT count(*) AS n FROM notification_outbox")
            .await,
        2,
        "the rolled-back finalize left no event"
    );
    let arrivals = receiver.arrivals();
    let types: Vec<&str> = arrivals
        .iter()
        .map(|a| a.body["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        ["video.accepted", "video.ready"],
        "nothing from the zombie"
    );
    let hls = arrivals[1].body["data"]["playback"]["hls_key"]
        .as_str()
        .unwrap();
    assert!(
        hls.contains("/a2/"),
        "the winner's outputs are announced: {hls}"
    );
}
