//! Acknowledging: where each try left its delivery, written for a batch of tries in one
//! statement fenced on their claim tokens, with the try logged beside it.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    Array, BigInt, Double, Integer, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::prepared::prepared;

/// Where a try left a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The destination took it.
    Delivered,
    /// Try again after `retry_secs`.
    Retry,
    /// No tries left.
    Exhausted,
    /// The endpoint is gone (410); nothing more is sent.
    Discarded,
}

impl Settled {
    /// How the try ended, as the relay's metrics label it.
    pub fn label(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            other => other.as_str(),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::Retry => "pending",
            Self::Exhausted => "exhausted",
            Self::Discarded => "discarded",
        }
    }
}

/// The result of one try, to be acknowledged.
#[derive(Debug, Clone)]
pub struct Ack {
    /// Delivery id.
    pub id: i64,
    /// The token it was claimed with.
    pub token: Uuid,
    /// Where it goes now.
    pub settled: Settled,
    /// Seconds until the next try (for `Retry`).
    pub retry_secs: f64,
    /// The receiver's status code, if it answered.
    pub response_status: Option<i32>,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// When the try started.
    pub started_at: DateTime<Utc>,
}

/// Acknowledges a batch of tries in one statement, each fenced on its claim token, and logs
/// every acknowledged try. Returns the ids that were still ours; a try whose lease lapsed
/// and was reclaimed changes nothing.
pub async fn ack(
    conn: &mut AsyncPgConnection,
    relay: &str,
    acks: &[&Ack],
) -> QueryResult<Vec<i64>> {
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = BigInt)]
        id: i64,
    }
    // Rows are updated in id order, the order every other path locks deliveries in.
    let mut acks = acks.to_vec();
    acks.sort_by_key(|a| a.id);
    let ids: Vec<i64> = acks.iter().map(|a| a.id).collect();
    let tokens: Vec<Uuid> = acks.iter().map(|a| a.token).collect();
    let statuses: Vec<&str> = acks.iter().map(|a| a.settled.as_str()).collect();
    let retry: Vec<f64> = acks.iter().map(|a| a.retry_secs).collect();
    let codes: Vec<Option<i32>> = acks.iter().map(|a| a.response_status).collect();
    let errors: Vec<Option<&str>> = acks.iter().map(|a| a.error.as_deref()).collect();
    let started: Vec<DateTime<Utc>> = acks.iter().map(|a| a.started_at).collect();
    let rows: Vec<Id> = prepared(
        "WITH outcome AS (
             SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::float8[], $5::int4[],
                                  $6::text[], $7::timestamptz[])
                 AS u(id, token, status, retry_secs, response_status, error, started_at)
         ), acked AS (
             UPDATE event_deliveries d
                SET status = u.status,
                    next_attempt_at = CASE WHEN u.status = 'pending'
                        THEN statement_timestamp() + make_interval(secs => u.retry_secs)
                        ELSE d.next_attempt_at END,
                    delivered_at = CASE WHEN u.status = 'delivered' THEN statement_timestamp() END,
                    last_error = u.error,
                    claim_token = NULL
               FROM outcome u
              WHERE d.id = u.id AND d.claim_token = u.token AND d.status = 'sending'
             RETURNING d.id, d.attempt_count
         ), logged AS (
             INSERT INTO delivery_attempts
                 (delivery_id, attempt, relay_id, started_at, finished_at, response_status, error)
             SELECT a.id, a.attempt_count, $8, u.started_at, statement_timestamp(),
                    u.response_status, u.error
               FROM acked a JOIN outcome u ON u.id = a.id
             ON CONFLICT DO NOTHING
         )
         SELECT id FROM acked",
    )
    .bind::<Array<BigInt>, _>(ids)
    .bind::<Array<SqlUuid>, _>(tokens)
    .bind::<Array<Text>, _>(statuses)
    .bind::<Array<Double>, _>(retry)
    .bind::<Array<Nullable<Integer>>, _>(codes)
    .bind::<Array<Nullable<Text>>, _>(errors)
    .bind::<Array<Timestamptz>, _>(started)
    .bind::<Text, _>(relay)
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}
