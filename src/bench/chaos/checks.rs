//! What must hold once the faults stop and the healed deployment has had its time: nothing
//! confirmed is lost, nothing is announced twice, nothing is left half done.

use std::collections::HashMap;

use diesel::QueryableByName;
use diesel::sql_types::{Array, BigInt, Text, Uuid as SqlUuid};
use diesel_async::RunQueryDsl;
use uuid::Uuid;

use crate::db::DbPool;

/// One check and how it came out.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    /// What is checked.
    pub name: &'static str,
    /// Whether it held.
    pub ok: bool,
    /// The figures behind it.
    pub detail: String,
}

/// The database's side of the checks.
#[derive(Debug, QueryableByName)]
struct Counts {
    #[diesel(sql_type = BigInt)]
    confirmed_ready: i64,
    #[diesel(sql_type = BigInt)]
    videos: i64,
    #[diesel(sql_type = BigInt)]
    ready_once: i64,
    #[diesel(sql_type = BigInt)]
    ready_twice: i64,
    #[diesel(sql_type = BigInt)]
    jobs_open: i64,
    #[diesel(sql_type = BigInt)]
    jobs_processing: i64,
    #[diesel(sql_type = BigInt)]
    ledger_pending: i64,
    #[diesel(sql_type = BigInt)]
    deliveries_open: i64,
}

#[derive(Debug, QueryableByName)]
struct EventId {
    #[diesel(sql_type = Text)]
    id: String,
}

/// The checks that the database and the receiver answer; `confirmed` are the uploads the
/// API confirmed to a client, `received` the event ids the receiver verified (with how often
/// each arrived), `bad` the deliveries that did not verify.
pub async fn settled(
    pool: &DbPool,
    confirmed: &[Uuid],
    received: &HashMap<String, u32>,
    bad: u32,
) -> anyhow::Result<Vec<Check>> {
    let mut conn = pool.get().await?;
    let counts: Counts = diesel::sql_query(
        "SELECT (SELECT count(*) FROM uploads u JOIN videos v ON v.upload_id = u.id
                  WHERE u.id = ANY($1) AND v.status = 'ready') AS confirmed_ready,
                (SELECT count(*) FROM videos) AS videos,
                (SELECT count(*) FROM videos v WHERE (SELECT count(*) FROM notification_outbox o
                  WHERE o.video_id = v.id AND o.event_type = 'video.ready') = 1) AS ready_once,
                (SELECT count(*) FROM videos v WHERE (SELECT count(*) FROM notification_outbox o
                  WHERE o.video_id = v.id AND o.event_type = 'video.ready') > 1) AS ready_twice,
                (SELECT count(*) FROM video_encoding_jobs WHERE status <> 'COMPLETED') AS jobs_open,
                (SELECT count(*) FROM video_encoding_jobs WHERE status = 'PROCESSING') AS jobs_processing,
                (SELECT count(*) FROM uploads WHERE state = 'pending')
                  + (SELECT count(*) FROM recording_files WHERE state = 'pending')
                  + (SELECT count(*) FROM video_artifacts WHERE state = 'pending') AS ledger_pending,
                (SELECT count(*) FROM event_deliveries WHERE status <> 'delivered') AS deliveries_open",
    )
    .bind::<Array<SqlUuid>, _>(confirmed)
    .get_result(&mut conn)
    .await?;
    let events: Vec<EventId> =
        diesel::sql_query("SELECT event_id::text AS id FROM notification_outbox")
            .load(&mut conn)
            .await?;
    let missing = events
        .iter()
        .filter(|e| !received.contains_key(&e.id))
        .count();
    let strangers = received.len() + missing - events.len();
    let repeated: u32 = received.values().map(|n| n - 1).sum();
    let n = confirmed.len() as i64;
    Ok(vec![
        Check {
            name: "every confirmed upload READY",
            ok: counts.confirmed_ready == n,
            detail: format!("{}/{n}", counts.confirmed_ready),
        },
        Check {
            name: "exactly one video.ready per video",
            ok: counts.ready_once == counts.videos && counts.ready_twice == 0,
            detail: format!(
                "{} videos: {} with one, {} with more",
                counts.videos, counts.ready_once, counts.ready_twice
            ),
        },
        Check {
            name: "every event delivered and verified",
            ok: missing == 0 && strangers == 0 && bad == 0 && counts.deliveries_open == 0,
            detail: format!(
                "{} events; {missing} never arrived, {strangers} unknown ids, {bad} bad signatures, {repeated} repeated ids (retries), {} deliveries open",
                events.len(),
                counts.deliveries_open
            ),
        },
        Check {
            name: "no job left PROCESSING or queued",
            ok: counts.jobs_open == 0,
            detail: format!(
                "{} not COMPLETED, {} PROCESSING",
                counts.jobs_open, counts.jobs_processing
            ),
        },
        Check {
            name: "no ledger row pending",
            ok: counts.ledger_pending == 0,
            detail: counts.ledger_pending.to_string(),
        },
    ])
}
