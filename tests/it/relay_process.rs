//! A real `vidq relay` process SIGKILLed while a receiver holds its request: nothing is lost,
//! and the resend after the lease carries the same event id.

use std::time::Duration;

use tokio::process::Child;

use crate::support::app::TestApp;
use crate::support::process::vidq_child;
use crate::support::receiver::{Receiver, Reply};
use crate::support::relay::{produce, register, user_id};
use crate::support::wait::wait_for_count;

fn spawn_relay(app: &TestApp, log: &std::path::Path) -> Child {
    vidq_child("relay", log)
        .env("DATABASE_URL", &app.db.url)
        .env("VIDQ_WEBHOOK_ALLOW_PRIVATE", "true")
        .env("VIDQ_RELAY_LEASE_SECS", "6")
        .env("VIDQ_WEBHOOK_TIMEOUT_MS", "3000")
        .env("VIDQ_RELAY_POLL_MS", "100")
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn a_relay_killed_mid_send_loses_nothing_and_the_resend_keeps_the_id() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    register(&app, &key, &receiver.url).await;
    // The first try is held open far past the relay's life; later tries succeed.
    receiver.script(|_, nth| {
        if nth == 1 {
            Reply::Slow(Duration::from_secs(30))
        } else {
            Reply::Status(200)
        }
    });
    let logs = tempfile::tempdir().unwrap();
    let mut first = spawn_relay(&app, &logs.path().join("first.log"));
    let event = produce(&app, owner, 1).await.remove(0);
    receiver
        .wait_until(Duration::from_secs(30), |a| !a.is_empty())
        .await;
    first.start_kill().unwrap(); // SIGKILL
    first.wait().await.unwrap();
    assert_eq!(
        app.count("SELECT count(*) AS n FROM event_deliveries WHERE status = 'sending'")
            .await,
        1,
        "the dead relay's claim is still out"
    );

    let mut second = spawn_relay(&app, &logs.path().join("second.log"));
    receiver
        .wait_for_delivered(1, Duration::from_secs(30))
        .await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM event_deliveries WHERE status = 'delivered' AND attempt_count = 2",
        1,
        Duration::from_secs(10),
    )
    .await;
    second.start_kill().unwrap();
    let arrivals = receiver.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert!(
        arrivals.iter().all(|a| a.id == event),
        "the same id both times"
    );
    assert_eq!(arrivals[0].body, arrivals[1].body);
    // Only the try that was acknowledged is in the log; the killed one never finished.
    assert_eq!(
        app.count("SELECT count(*) AS n FROM delivery_attempts WHERE attempt = 2 AND response_status = 200")
            .await,
        1
    );
}
