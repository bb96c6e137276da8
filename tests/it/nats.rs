//! The NATS JetStream sink against the NATS server on 127.0.0.1:4222 (or, when none answers
//! there, a `nats-server -js` this run starts on a free port): a republished event is
//! dropped by the stream's duplicate window, so a relay retry within it is invisible to
//! consumers (after the window, delivery is at least once and consumers dedupe by id).

use std::time::Duration;

use vidq::adapters::nats::NatsSink;

use crate::support::app::TestApp;
use crate::support::relay::{RelayRun, produce, relay_args, user_id};
use crate::support::wait::wait_for_count;

/// The server the tests publish to.
fn nats_url() -> &'static str {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        if crate::support::process::answers("127.0.0.1:4222") {
            return "nats://127.0.0.1:4222".to_owned();
        }
        let port = crate::support::process::free_port().to_string();
        let store = tempfile::tempdir().unwrap().keep();
        crate::support::process::run_while_tests_run(
            "nats-server",
            &[
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &port,
                "-sd",
                &store.to_string_lossy(),
            ],
            &store,
        );
        let addr = format!("127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !crate::support::process::answers(&addr) {
            assert!(
                std::time::Instant::now() < deadline,
                "nothing answers on 127.0.0.1:4222 and nats-server (-js) did not start; install it"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        format!("nats://{addr}")
    })
}

/// A stream and subject prefix no other test run uses.
fn names() -> (String, String) {
    let tag = uuid::Uuid::now_v7().simple().to_string();
    (format!("VIDQTEST_{tag}"), format!("vidqtest{tag}"))
}

async fn messages_in(stream: &str) -> u64 {
    let client = async_nats::connect(nats_url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream(stream).await.unwrap();
    stream.info().await.unwrap().state.messages
}

async fn delete_stream(stream: &str) {
    let client = async_nats::connect(nats_url()).await.unwrap();
    async_nats::jetstream::new(client)
        .delete_stream(stream)
        .await
        .unwrap();
}

#[tokio::test]
async fn jetstream_drops_a_republished_event_as_a_duplicate() {
    let (stream, prefix) = names();
    let sink = NatsSink::connect(nats_url(), &stream, &prefix)
        .await
        .unwrap();
    let id = uuid::Uuid::now_v7().to_string();
    let first = sink
        .publish(&id, "video.ready", b"{}".to_vec())
        .await
        .unwrap();
    let again = sink
        .publish(&id, "video.ready", b"{}".to_vec())
        .await
        .unwrap();
    let other = sink
        .publish(
            &uuid::Uuid::now_v7().to_string(),
            "video.ready",
            b"{}".to_vec(),
        )
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert!(again.duplicate, "the same Nats-Msg-Id is dropped");
    assert_eq!(again.sequence, first.sequence);
    assert!(!other.duplicate);
    assert_eq!(messages_in(&stream).await, 2);
    delete_stream(&stream).await;
}

#[tokio::test]
async fn the_relay_publishes_every_event_and_a_resend_changes_nothing_for_consumers() {
    let app = TestApp::spawn().await;
    app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let (stream, prefix) = names();
    let mut args = relay_args("0,100ms");
    args.nats_url = Some(nats_url().into());
    args.nats_stream = stream.clone();
    args.nats_subject_prefix = prefix;
    let relay = RelayRun::start(&app, &args).await;
    let ids = produce(&app, owner, 3).await;
    let delivered =
        "SELECT count(*) AS n FROM event_deliveries WHERE sink = 'nats' AND status = 'delivered'";
    wait_for_count(&app, delivered, 3, Duration::from_secs(20)).await;
    assert_eq!(messages_in(&stream).await, 3);
    // Each message carries its event id as Nats-Msg-Id, and the envelope as its payload.
    let client = async_nats::connect(nats_url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let handle = js.get_stream(&stream).await.unwrap();
    let mut published = Vec::new();
    for seq in 1..=3 {
        let message = handle.get_raw_message(seq).await.unwrap();
        let msg_id = message
            .headers
            .get("Nats-Msg-Id")
            .unwrap()
            .as_str()
            .to_owned();
        let body: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(body["id"], msg_id.as_str());
        assert!(
            message.subject.ends_with(".video.accepted"),
            "{}",
            message.subject
        );
        published.push(msg_id);
    }
    published.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(published, expected);

    // As if every ack had been lost: the relay sends all three again, with the same ids.
    assert_eq!(
        app.count("WITH r AS (UPDATE event_deliveries SET status = 'pending', next_attempt_at = now() RETURNING 1) SELECT count(*) AS n FROM r")
            .await,
        3
    );
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM event_deliveries WHERE status = 'delivered' AND attempt_count = 2",
        3,
        Duration::from_secs(20),
    )
    .await;
    relay.stop().await;
    assert_eq!(
        messages_in(&stream).await,
        3,
        "the stream dropped the copies"
    );
    delete_stream(&stream).await;
}
