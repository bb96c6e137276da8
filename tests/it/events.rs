//! The pull feed: owner-scoped pages in an order that never skips an event whose transaction
//! committed late (I8), the type filter, the long-poll, and the errors.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::Utc;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use reqwest::StatusCode;
use serde_json::Value;
use vidq::domain::event::Event;
use vidq::domain::ids::{UploadId, VideoId};

use crate::support::app::TestApp;
use crate::support::relay::{produce, user_id};

async fn page(app: &TestApp, key: &str, query: &str) -> (Vec<String>, String) {
    let response = app.get(key, &format!("/v1/events?{query}")).await;
    assert_eq!(response.status(), StatusCode::OK, "{query}");
    let body: Value = response.json().await.unwrap();
    let ids = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    (ids, body["next_cursor"].as_str().unwrap().to_owned())
}

/// Reads from `query` until at least `want` events are visible. The feed holds events back
/// while ANY older write transaction on the server is open, and other tests run in parallel
/// on the same server, so a single read may legitimately come back short.
async fn page_until(app: &TestApp, key: &str, query: &str, want: usize) -> (Vec<String>, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ids, cursor) = page(app, key, query).await;
        if ids.len() >= want || Instant::now() > deadline {
            return (ids, cursor);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn event() -> Event {
    Event::video_accepted(VideoId::new(), UploadId::new(), Utc::now())
}

#[tokio::test]
async fn an_event_whose_transaction_is_still_open_holds_back_later_ones() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let (early, late) = (event(), event());

    // Transaction A writes first (lower id, lower xid) and stays open.
    let mut a = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    diesel::sql_query("BEGIN").execute(&mut a).await.unwrap();
    vidq::db::deliveries::outbox::insert(&a, owner, &early)
        .await
        .unwrap();
    // Transaction B writes after it and commits at once.
    let b = app.pool.get().await.unwrap();
    vidq::db::deliveries::outbox::insert(&b, owner, &late)
        .await
        .unwrap();

    // A cursor on the id column would hand out B now and skip A for ever; the feed waits.
    let (ids, cursor) = page(&app, &key, "").await;
    assert!(ids.is_empty(), "{ids:?}");
    diesel::sql_query("COMMIT").execute(&mut a).await.unwrap();
    let (ids, _) = page_until(&app, &key, &format!("after={cursor}"), 2).await;
    assert_eq!(ids, [early.id.to_string(), late.id.to_string()]);
}

#[tokio::test]
async fn concurrent_producers_and_a_reader_following_cursors_see_every_event_once() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let producers: Vec<_> = (0..6)
        .map(|p| {
            let url = app.db.url.clone();
            tokio::spawn(async move {
                let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
                let mut ids = Vec::new();
                for i in 0..25u64 {
                    let event = event();
                    ids.push(event.id.to_string());
                    // Hold each transaction open a different while, so commits land out of
                    // id and xid order.
                    let hold = Duration::from_millis((p * 7 + i * 13) % 23);
                    conn.transaction::<_, diesel::result::Error, _>(async |c| {
                        vidq::db::deliveries::outbox::insert(c, owner, &event).await?;
                        tokio::time::sleep(hold).await;
                        Ok(())
                    })
                    .await
                    .unwrap();
                }
                ids
            })
        })
        .collect();

    let mut seen = Vec::new();
    let mut cursor = String::new();
    let total = 6 * 25;
    let deadline = Instant::now() + Duration::from_secs(60);
    // Follow the cursor while producers run, then until everything is visible (or too long).
    while seen.len() < total && Instant::now() < deadline {
        let (ids, next) = page(&app, &key, &format!("after={cursor}&limit=7")).await;
        seen.extend(ids);
        cursor = next;
    }
    let mut produced = Vec::new();
    for p in producers {
        produced.extend(p.await.unwrap());
    }
    // Nothing more may come after the reader has seen them all.
    let (late, _) = page(&app, &key, &format!("after={cursor}")).await;
    seen.extend(late);
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no event twice");
    assert_eq!(
        unique,
        produced.iter().collect::<HashSet<_>>(),
        "no event missed"
    );
}

#[tokio::test]
async fn the_feed_is_the_callers_own_filters_by_type_and_refuses_bad_input() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let stranger = app.create_user("mallory").await;
    let owner = user_id(&app, "alice").await;
    let conn = app.pool.get().await.unwrap();
    let failed = Event::video_failed(
        VideoId::new(),
        1,
        Utc::now(),
        "invalid_media",
        "not a video",
    );
    vidq::db::deliveries::outbox::insert(&conn, owner, &failed)
        .await
        .unwrap();
    let accepted = produce(&app, owner, 2).await;

    let (ids, _) = page_until(&app, &key, "", 3).await;
    assert_eq!(ids.len(), 3);
    let (ids, _) = page(&app, &stranger, "").await;
    assert!(ids.is_empty());
    let (ids, _) = page(&app, &key, "type=video.failed").await;
    assert_eq!(ids, [failed.id.to_string()]);
    let (ids, cursor) = page(&app, &key, "type=video.accepted&limit=1").await;
    assert_eq!(ids, [accepted[0].clone()]);
    let (ids, _) = page(&app, &key, &format!("type=video.accepted&after={cursor}")).await;
    assert_eq!(ids, [accepted[1].clone()]);

    for query in [
        "after=nonsense",
        "limit=0",
        "limit=1001",
        "wait=31",
        "type=video.exploded",
    ] {
        let response = app.get(&key, &format!("/v1/events?{query}")).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{query}");
    }
    let response = app.http.get(app.url("/v1/events")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_long_poll_answers_as_soon_as_an_event_commits() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let owner = user_id(&app, "alice").await;
    let (_, cursor) = page(&app, &key, "").await;

    let started = Instant::now();
    let waiting = {
        let (http, url) = (
            app.http.clone(),
            app.url(&format!("/v1/events?after={cursor}&wait=20")),
        );
        let key = key.clone();
        tokio::spawn(async move {
            let body: Value = http
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            (body, started.elapsed())
        })
    };
    // While it waits, the API holds the waiting lock, so producers NOTIFY it.
    let feed_lock = format!(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND classid = ({key} >> 32)::oid AND objid = ({key} & 4294967295)::oid",
        key = vidq::db::wake::WAITING_LOCK
    );
    crate::support::wait::wait_for_count(&app, &feed_lock, 1, Duration::from_secs(10)).await;
    assert!(
        !waiting.is_finished(),
        "nothing to return yet, so the request waits"
    );
    let ids = produce(&app, owner, 1).await;
    let (body, elapsed) = waiting.await.unwrap();
    assert_eq!(body["events"][0]["id"], ids[0].as_str());
    // Nobody waits any more: the lock is let go, and producers stop notifying.
    crate::support::wait::wait_for_count(&app, &feed_lock, 0, Duration::from_secs(10)).await;
    assert!(
        elapsed < Duration::from_secs(15),
        "answered after the commit, not at the end of the wait ({elapsed:?})"
    );

    // An empty wait ends with an empty page and the same cursor.
    let (ids, next) = page(
        &app,
        &key,
        &format!("after={}&wait=1", body["next_cursor"].as_str().unwrap()),
    )
    .await;
    assert!(ids.is_empty());
    assert_eq!(next, body["next_cursor"].as_str().unwrap());
}
