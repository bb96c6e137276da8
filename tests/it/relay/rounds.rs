//! The relay's own rounds: finished history past the retention is pruned (and nothing
//! else), an idle relay is woken by every commit rather than its poll, and routing a batch
//! reads no more waiting deliveries than it routes, whatever the backlog.

use std::time::Duration;

use diesel_async::RunQueryDsl;
use serde_json::Value;
use uuid::Uuid;

use crate::support::app::TestApp;
use crate::support::receiver::Receiver;
use crate::support::relay::{RelayRun, produce, register, relay_args, user_id};
use crate::support::wait::wait_for_count;

#[tokio::test]
async fn finished_history_past_the_retention_is_pruned_and_nothing_else() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    register(&app, &key, &receiver.url).await;
    let relay = RelayRun::start(&app, &relay_args("0")).await;
    let ids = produce(&app, owner, 3).await;
    receiver
        .wait_for_delivered(3, Duration::from_secs(20))
        .await;
    relay.stop().await;
    // Two events are two days old; one of those still has a delivery waiting.
    let aged = format!(
        "WITH o AS (UPDATE notification_outbox SET created_at = now() - interval '2 days'
                     WHERE event_id IN ('{}', '{}') RETURNING 1) SELECT count(*) AS n FROM o",
        ids[0], ids[1]
    );
    assert_eq!(app.count(&aged).await, 2);
    let waiting = format!(
        "WITH d AS (INSERT INTO event_deliveries (outbox_id, sink, endpoint_id, next_attempt_at)
                    SELECT o.id, 'webhook', w.id, now() + interval '1 day'
                      FROM notification_outbox o, webhook_endpoints w WHERE o.event_id = '{}'
                    RETURNING 1) SELECT count(*) AS n FROM d",
        ids[1]
    );
    assert_eq!(app.count(&waiting).await, 1);
    let mut args = relay_args("0");
    args.retention_hours = 24;
    let relay = RelayRun::start(&app, &args).await;
    wait_for_count(
        &app,
        "SELECT count(*) AS n FROM notification_outbox",
        2,
        Duration::from_secs(20),
    )
    .await;
    relay.stop().await;
    let kept =
        |id: &str| format!("SELECT count(*) AS n FROM notification_outbox WHERE event_id = '{id}'");
    assert_eq!(
        app.count(&kept(&ids[0])).await,
        0,
        "old and finished: pruned"
    );
    assert_eq!(
        app.count(&kept(&ids[1])).await,
        1,
        "old but still being delivered: kept"
    );
    assert_eq!(app.count(&kept(&ids[2])).await, 1, "recent: kept");
    assert_eq!(
        app.count("SELECT count(*) AS n FROM delivery_attempts")
            .await,
        2,
        "the tries of the kept events stay (the pruned one's go with it)"
    );
}

#[tokio::test]
async fn an_idle_relay_is_woken_by_every_commit_and_never_waits_for_its_poll() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let receiver = Receiver::start();
    register(&app, &key, &receiver.url).await;
    // A poll so long that any lost wake-up shows as a delivery that never comes in time.
    let mut args = relay_args("0");
    args.relay_poll_ms = 60_000;
    let relay = RelayRun::start(&app, &args).await;
    let mut expected = 0;
    for round in 0..30u64 {
        // Single events after idle spells of different lengths, and bursts from several
        // producers at once, so the relay keeps crossing between busy and idle.
        if round % 3 == 0 {
            let burst: Vec<_> = (0..4).map(|_| produce(&app, owner, 3)).collect();
            futures_util::future::join_all(burst).await;
            expected += 12;
        } else {
            produce(&app, owner, 1).await;
            expected += 1;
        }
        receiver
            .wait_for_delivered(expected, Duration::from_secs(5))
            .await;
        // The idle spell before the next round (its length is what varies).
        tokio::time::sleep(Duration::from_millis(round * 7 % 40)).await;
    }
    relay.stop().await;
}

#[derive(diesel::QueryableByName)]
struct Plan {
    #[diesel(sql_type = diesel::sql_types::Json, column_name = "QUERY PLAN")]
    plan: Value,
}

/// Rows a plan node and its children read from `event_deliveries`, or threw away in a join
/// filter, over all their loops.
fn deliveries_read(node: &Value) -> f64 {
    let number = |key: &str| node[key].as_f64().unwrap_or(0.0);
    let loops = number("Actual Loops");
    let mut read = number("Rows Removed by Join Filter") * loops;
    if node["Relation Name"] == "event_deliveries" && node["Node Type"] != "ModifyTable" {
        read += (number("Actual Rows") + number("Rows Removed by Filter")) * loops;
    }
    let children = node["Plans"].as_array().into_iter().flatten();
    read + children.map(deliveries_read).sum::<f64>()
}

/// The rows the plan's insert into `event_deliveries` wrote.
fn routed(node: &Value) -> Option<f64> {
    if node["Node Type"] == "ModifyTable" && node["Relation Name"] == "event_deliveries" {
        return node["Actual Rows"].as_f64();
    }
    let children = node["Plans"].as_array().into_iter().flatten();
    children.filter_map(routed).next()
}

/// An endpoint whose receiver was down has many deliveries waiting. Routing checks every new
/// event against the waiting ones (a resend may have queued it first); that check must stay
/// one lookup per event whatever plan PostgreSQL picks, or each event's routing grows with
/// the backlog. A generic plan (what a prepared statement gets once its custom plans look no
/// cheaper) once answered it by reading every waiting delivery of the endpoint per event.
#[tokio::test]
async fn routing_a_batch_reads_no_more_waiting_deliveries_than_it_routes_whatever_the_backlog() {
    use diesel_async::SimpleAsyncConnection;
    let db = crate::support::db::TestDb::new().await;
    let pool = vidq::db::connect(&db.url, 1).await.unwrap();
    let mut conn = pool.get().await.unwrap();
    const WAITING: usize = 3000;
    const NEW: i64 = 64;
    conn.batch_execute(&format!(
        "INSERT INTO users (id, name, api_key_hash) VALUES ('{owner}', 'backlog', sha256('k'));
         INSERT INTO webhook_endpoints (id, owner_id, url, secret, created_at)
              VALUES ('{endpoint}', '{owner}', 'http://127.0.0.1:9/', 's', now() - interval '1 day');
         INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload, routed_at)
              SELECT gen_random_uuid(), 'video.accepted', '{owner}', gen_random_uuid(), '{{}}',
                     CASE WHEN n <= {WAITING} THEN now() END
                FROM generate_series(1, {WAITING} + {NEW}) n;
         INSERT INTO event_deliveries (outbox_id, sink, endpoint_id)
              SELECT id, 'webhook', '{endpoint}' FROM notification_outbox WHERE routed_at IS NOT NULL;",
        owner = Uuid::now_v7(),
        endpoint = Uuid::now_v7(),
    ))
    .await
    .unwrap();
    for mode in ["force_generic_plan", "force_custom_plan"] {
        conn.batch_execute(&format!(
            "BEGIN; SET LOCAL plan_cache_mode = {mode};
             PREPARE route_probe(bigint, boolean) AS {};",
            vidq::db::deliveries::ROUTE_SQL
        ))
        .await
        .unwrap();
        let plan: Plan = diesel::sql_query(format!(
            "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE route_probe({NEW}, false)"
        ))
        .get_result(&mut conn)
        .await
        .unwrap();
        conn.batch_execute("ROLLBACK; DEALLOCATE route_probe;")
            .await
            .unwrap();
        let plan = plan.plan;
        assert_eq!(
            routed(&plan[0]["Plan"]),
            Some(NEW as f64),
            "{mode}: the batch made a delivery for every new event: {:#}",
            plan[0]["Plan"]
        );
        let read = deliveries_read(&plan[0]["Plan"]);
        assert!(
            read <= NEW as f64,
            "{mode}: routing {NEW} events read {read} waiting deliveries: {:#}",
            plan[0]["Plan"]
        );
    }
}
