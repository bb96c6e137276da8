//! The relay's queue: one delivery per (event, destination), routed from the outbox exactly
//! once, claimed with `FOR UPDATE SKIP LOCKED` and a lease, acknowledged with an UPDATE
//! fenced on the claim token. The same shape as encoding jobs, so several relays can run.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    Array, BigInt, Bool, Double, Integer, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::prepared::prepared;
use crate::domain::sink::SinkKind;
use crate::domain::upload::UnknownState;

/// What one routing round did.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct Routed {
    /// Outbox rows routed.
    #[diesel(sql_type = BigInt)]
    pub events: i64,
    /// Deliveries created for them.
    #[diesel(sql_type = BigInt)]
    pub deliveries: i64,
}

/// The routing statement ([`route`]): `$1` batch size, `$2` whether NATS deliveries are made.
/// Its duplicate check (`NOT EXISTS`) must stay one index lookup per event whatever plan
/// PostgreSQL picks; `event_deliveries_waiting_idx` carries the event for that (migration
/// 000012).
pub const ROUTE_SQL: &str = "
WITH batch AS (
    SELECT o.id, o.owner_id, o.event_type, o.created_at
      FROM notification_outbox o
     WHERE o.routed_at IS NULL
     ORDER BY o.id
     FOR UPDATE SKIP LOCKED
     LIMIT $1
), stamped AS (
    UPDATE notification_outbox o SET routed_at = statement_timestamp()
      FROM batch WHERE o.id = batch.id
), created AS (
    INSERT INTO event_deliveries (outbox_id, sink, endpoint_id)
    SELECT b.id, 'webhook', w.id
      FROM batch b
      JOIN webhook_endpoints w ON w.owner_id = b.owner_id
     WHERE w.disabled_at IS NULL
       AND w.created_at <= b.created_at
       AND (w.event_types IS NULL OR b.event_type = ANY (w.event_types))
       -- A resend before routing already queued this one: join it. OFFSET 0 keeps this a
       -- lookup per (event, endpoint) with both as keys: PostgreSQL would otherwise turn it
       -- into an anti join, and could then probe by the endpoint alone.
       AND NOT EXISTS (SELECT 1 FROM event_deliveries d
                        WHERE d.outbox_id = b.id AND d.endpoint_id = w.id
                          AND d.status IN ('pending', 'sending')
                       OFFSET 0)
    UNION ALL
    SELECT b.id, 'nats', NULL FROM batch b WHERE $2
    RETURNING 1
)
SELECT (SELECT count(*) FROM batch) AS events, (SELECT count(*) FROM created) AS deliveries";

/// Routes up to `limit` unrouted outbox rows, oldest first: one webhook delivery per live
/// endpoint of the event's owner that wants its type (and existed when it happened), plus one
/// NATS delivery when `to_nats`. Rows are claimed with SKIP LOCKED and stamped in the same
/// statement, so concurrent relays never route a row twice.
pub async fn route(conn: &mut AsyncPgConnection, limit: i64, to_nats: bool) -> QueryResult<Routed> {
    prepared(ROUTE_SQL)
        .bind::<BigInt, _>(limit)
        .bind::<Bool, _>(to_nats)
        .get_result(conn)
        .await
}

/// A claimed delivery as the claim statement returns it.
#[derive(Debug, Clone, QueryableByName)]
struct ClaimedRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = SqlUuid)]
    claim_token: Uuid,
    #[diesel(sql_type = Text)]
    sink: String,
    #[diesel(sql_type = Integer)]
    attempt: i32,
    #[diesel(sql_type = SqlUuid)]
    event_id: Uuid,
    #[diesel(sql_type = Text)]
    event_type: String,
    #[diesel(sql_type = Text)]
    body: String,
    #[diesel(sql_type = Timestamptz)]
    event_created_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<SqlUuid>)]
    endpoint_id: Option<Uuid>,
    #[diesel(sql_type = Nullable<Text>)]
    url: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    secret: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    previous_secret: Option<String>,
    #[diesel(sql_type = Bool)]
    endpoint_disabled: bool,
}

/// The webhook endpoint a delivery goes to, as it stood when the delivery was claimed.
#[derive(Debug, Clone)]
pub struct EndpointTarget {
    /// Endpoint id.
    pub id: Uuid,
    /// Where to POST.
    pub url: String,
    /// The current signing secret.
    pub secret: String,
    /// The previous secret while a rotation is in progress.
    pub previous_secret: Option<String>,
    /// The endpoint was disabled (410) after this delivery was created: do not send.
    pub disabled: bool,
}

/// A claimed delivery with everything needed to send it.
#[derive(Debug, Clone)]
pub struct ClaimedDelivery {
    /// Delivery id.
    pub id: i64,
    /// The fencing token of this claim.
    pub claim_token: Uuid,
    /// Which sink sends it (chosen when it was routed).
    pub sink: SinkKind,
    /// This try's number (1-based).
    pub attempt: i32,
    /// The event id: `webhook-id`, `Nats-Msg-Id`.
    pub event_id: Uuid,
    /// `video.ready`...
    pub event_type: String,
    /// The event envelope, byte for byte what is sent.
    pub body: String,
    /// When the producing statement ran (for commit-to-delivery latency).
    pub event_created_at: DateTime<Utc>,
    /// The webhook endpoint, for webhook deliveries.
    pub endpoint: Option<EndpointTarget>,
}

impl TryFrom<ClaimedRow> for ClaimedDelivery {
    type Error = UnknownState;
    fn try_from(row: ClaimedRow) -> Result<Self, Self::Error> {
        // The schema ties `endpoint_id` to webhook deliveries and the endpoint's row cascades
        // to them, so an endpoint id comes with its URL and secret.
        let endpoint = match (row.endpoint_id, row.url, row.secret) {
            (Some(id), Some(url), Some(secret)) => Some(EndpointTarget {
                id,
                url,
                secret,
                previous_secret: row.previous_secret,
                disabled: row.endpoint_disabled,
            }),
            _ => None,
        };
        Ok(Self {
            id: row.id,
            claim_token: row.claim_token,
            sink: row.sink.parse()?,
            attempt: row.attempt,
            event_id: row.event_id,
            event_type: row.event_type,
            body: row.body,
            event_created_at: row.event_created_at,
            endpoint,
        })
    }
}

/// Claims up to `limit` due deliveries (waiting and due, or sending with a lapsed lease), in
/// due order, for `lease_secs`; commits at once. NATS deliveries only go to a relay that has
/// NATS (`with_nats`), so a relay configured without it never burns their tries.
pub async fn claim(
    conn: &mut AsyncPgConnection,
    relay: &str,
    limit: i64,
    lease_secs: f64,
    with_nats: bool,
) -> Result<Vec<ClaimedDelivery>, super::DbError> {
    let rows: Vec<ClaimedRow> = prepared(
        "WITH due AS (
             SELECT d.id FROM event_deliveries d
              WHERE d.status IN ('pending', 'sending') AND d.next_attempt_at <= statement_timestamp()
                AND (d.sink <> 'nats' OR $5)
              ORDER BY d.next_attempt_at, d.id
              FOR UPDATE SKIP LOCKED
              LIMIT $3
         ), claimed AS (
             UPDATE event_deliveries d
                SET status = 'sending', attempt_count = d.attempt_count + 1, claim_token = $1,
                    claimed_by = $2,
                    next_attempt_at = statement_timestamp() + make_interval(secs => $4)
               FROM due WHERE d.id = due.id
             RETURNING d.id, d.claim_token, d.sink, d.attempt_count, d.outbox_id, d.endpoint_id
         )
         SELECT c.id, c.claim_token, c.sink, c.attempt_count AS attempt, o.event_id, o.event_type,
                o.payload::text AS body, o.created_at AS event_created_at, c.endpoint_id, w.url,
                w.secret,
                CASE WHEN w.previous_secret_expires_at > statement_timestamp()
                     THEN w.previous_secret END AS previous_secret,
                w.disabled_at IS NOT NULL AS endpoint_disabled
           FROM claimed c
           JOIN notification_outbox o ON o.id = c.outbox_id
           LEFT JOIN webhook_endpoints w ON w.id = c.endpoint_id
          ORDER BY c.id",
    )
    .bind::<SqlUuid, _>(Uuid::now_v7())
    .bind::<Text, _>(relay)
    .bind::<BigInt, _>(limit)
    .bind::<Double, _>(lease_secs)
    .bind::<Bool, _>(with_nats)
    .load(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(ClaimedDelivery::try_from)
        .collect::<Result<_, _>>()?)
}

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

/// The outbox row of an event a resend names.
#[derive(Debug, Clone, QueryableByName)]
pub struct ResendableEvent {
    /// Outbox row id.
    #[diesel(sql_type = BigInt)]
    pub outbox_id: i64,
    /// `video.ready`...
    #[diesel(sql_type = Text)]
    pub event_type: String,
}

/// Finds the owner's event and locks its outbox row `FOR KEY SHARE` (so a resend takes the
/// outbox before the endpoint, in the lock order); `None` if it is not the owner's.
pub async fn lock_event_of_owner(
    conn: &mut AsyncPgConnection,
    owner: Uuid,
    event: Uuid,
) -> QueryResult<Option<ResendableEvent>> {
    prepared(
        "SELECT id AS outbox_id, event_type FROM notification_outbox
          WHERE event_id = $1 AND owner_id = $2 FOR KEY SHARE",
    )
    .bind::<SqlUuid, _>(event)
    .bind::<SqlUuid, _>(owner)
    .get_result(conn)
    .await
    .optional()
}

#[derive(QueryableByName)]
struct DeliveryId {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// The delivery of this event to this endpoint that waits for its next try, if any: a resend
/// joins it rather than adding a second one. (One in flight is not joined: its try may
/// already have reached the receiver, before the caller asked again.)
pub async fn waiting(
    conn: &mut AsyncPgConnection,
    outbox_id: i64,
    endpoint: Uuid,
) -> QueryResult<Option<i64>> {
    prepared(
        "SELECT id FROM event_deliveries
          WHERE outbox_id = $1 AND endpoint_id = $2 AND status = 'pending'
          ORDER BY id LIMIT 1",
    )
    .bind::<BigInt, _>(outbox_id)
    .bind::<SqlUuid, _>(endpoint)
    .get_result::<DeliveryId>(conn)
    .await
    .optional()
    .map(|row| row.map(|r| r.id))
}

/// How many deliveries resends made for the endpoint in the last `window_secs`, by the
/// database's clock (read through the partial index on resent deliveries).
pub async fn resends_since(
    conn: &mut AsyncPgConnection,
    endpoint: Uuid,
    window_secs: f64,
) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let n: N = prepared(
        "SELECT count(*) AS n FROM event_deliveries
          WHERE endpoint_id = $1 AND resent
            AND created_at > statement_timestamp() - make_interval(secs => $2)",
    )
    .bind::<SqlUuid, _>(endpoint)
    .bind::<Double, _>(window_secs)
    .get_result(conn)
    .await?;
    Ok(n.n)
}

/// Queues one more delivery of an event to an endpoint, and wakes the relays when the
/// caller's transaction commits.
pub async fn insert_resend(
    conn: &mut AsyncPgConnection,
    outbox_id: i64,
    endpoint: Uuid,
) -> QueryResult<i64> {
    prepared(format!(
        "WITH created AS (
             INSERT INTO event_deliveries (outbox_id, sink, endpoint_id, resent)
             VALUES ($1, 'webhook', $2, true)
             RETURNING id)
         SELECT id FROM created, pg_notify('{}', '')",
        super::outbox::EVENTS_CHANNEL
    ))
    .bind::<BigInt, _>(outbox_id)
    .bind::<SqlUuid, _>(endpoint)
    .get_result::<DeliveryId>(conn)
    .await
    .map(|r| r.id)
}

/// A delivery as its owner sees it.
#[derive(Debug, Clone, Queryable)]
pub struct DeliveryRow {
    /// Delivery id.
    pub id: i64,
    /// The event.
    pub event_id: Uuid,
    /// Its type.
    pub event_type: String,
    /// pending, sending, delivered, exhausted, discarded.
    pub status: String,
    /// Tries started.
    pub attempt_count: i32,
    /// When the next try is due (pending).
    pub next_attempt_at: DateTime<Utc>,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// A logged try.
#[derive(Debug, Clone, Queryable)]
pub struct AttemptRow {
    /// Its delivery.
    pub delivery_id: i64,
    /// Try number.
    pub attempt: i32,
    /// Which relay made it.
    pub relay_id: String,
    /// Start.
    pub started_at: DateTime<Utc>,
    /// End.
    pub finished_at: DateTime<Utc>,
    /// The receiver's status code.
    pub response_status: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
}

/// The endpoint's newest deliveries (at most `limit`) with their tries.
pub async fn of_endpoint(
    conn: &mut AsyncPgConnection,
    endpoint: Uuid,
    limit: i64,
) -> QueryResult<(Vec<DeliveryRow>, Vec<AttemptRow>)> {
    use super::schema::{delivery_attempts as a, event_deliveries as d, notification_outbox as o};
    let deliveries: Vec<DeliveryRow> = d::table
        .inner_join(o::table)
        .filter(d::endpoint_id.eq(endpoint))
        .order(d::id.desc())
        .limit(limit)
        .select((
            d::id,
            o::event_id,
            o::event_type,
            d::status,
            d::attempt_count,
            d::next_attempt_at,
            d::last_error,
            d::delivered_at,
            d::created_at,
        ))
        .load(conn)
        .await?;
    let ids: Vec<i64> = deliveries.iter().map(|r| r.id).collect();
    let attempts = a::table
        .filter(a::delivery_id.eq_any(ids))
        .order((a::delivery_id, a::attempt))
        .load(conn)
        .await?;
    Ok((deliveries, attempts))
}

/// Deletes up to `limit` outbox rows older than `retention_secs` (by the database's clock)
/// that are routed and whose deliveries are all finished, oldest first; their deliveries and
/// tries go with them. Rows another transaction holds are skipped, not waited for. Returns
/// how many.
pub async fn prune(
    conn: &mut AsyncPgConnection,
    retention_secs: f64,
    limit: i64,
) -> QueryResult<usize> {
    prepared(
        "DELETE FROM notification_outbox
          WHERE id IN (
              SELECT o.id FROM notification_outbox o
               WHERE o.created_at < statement_timestamp() - make_interval(secs => $1)
                 AND o.routed_at IS NOT NULL
                 AND NOT EXISTS (SELECT 1 FROM event_deliveries d
                                  WHERE d.outbox_id = o.id AND d.status IN ('pending', 'sending'))
               ORDER BY o.id
               FOR UPDATE SKIP LOCKED
               LIMIT $2)",
    )
    .bind::<Double, _>(retention_secs)
    .bind::<BigInt, _>(limit)
    .execute(conn)
    .await
}

/// Deletes up to `limit` of the owner's oldest outbox rows with their deliveries and tries,
/// locking the rows and then their deliveries in id order (lock order); returns how many
/// outbox rows went. One page of a user's deletion.
pub async fn delete_page_of_owner(
    conn: &mut AsyncPgConnection,
    owner: Uuid,
    limit: i64,
) -> QueryResult<usize> {
    #[derive(QueryableByName)]
    struct Id {
        #[diesel(sql_type = BigInt)]
        id: i64,
    }
    let ids: Vec<i64> = prepared(
        "SELECT id FROM notification_outbox WHERE owner_id = $1 ORDER BY id LIMIT $2 FOR UPDATE",
    )
    .bind::<SqlUuid, _>(owner)
    .bind::<BigInt, _>(limit)
    .load::<Id>(conn)
    .await?
    .into_iter()
    .map(|r| r.id)
    .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    prepared("SELECT 1 FROM event_deliveries WHERE outbox_id = ANY ($1) ORDER BY id FOR UPDATE")
        .bind::<Array<BigInt>, _>(&ids)
        .execute(conn)
        .await?;
    prepared("DELETE FROM notification_outbox WHERE id = ANY ($1)")
        .bind::<Array<BigInt>, _>(&ids)
        .execute(conn)
        .await
}

/// Locks the owner's outbox rows, webhook endpoints and deliveries, each in id order, so that
/// deleting the owner afterwards waits on no relay that waits on it (lock order).
pub async fn lock_of_owner(conn: &mut AsyncPgConnection, owner: Uuid) -> QueryResult<()> {
    for sql in [
        "SELECT 1 FROM notification_outbox WHERE owner_id = $1 ORDER BY id FOR UPDATE",
        "SELECT 1 FROM webhook_endpoints WHERE owner_id = $1 ORDER BY id FOR UPDATE",
        "SELECT 1 FROM event_deliveries d WHERE d.outbox_id IN
             (SELECT id FROM notification_outbox WHERE owner_id = $1) ORDER BY d.id FOR UPDATE OF d",
    ] {
        prepared(sql).bind::<SqlUuid, _>(owner).execute(conn).await?;
    }
    Ok(())
}

/// Outbox rows not yet routed plus deliveries not yet finished (benchmarks wait for 0).
pub async fn pending_count(conn: &mut AsyncPgConnection) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let n: N = prepared(
        "SELECT (SELECT count(*) FROM notification_outbox WHERE routed_at IS NULL)
              + (SELECT count(*) FROM event_deliveries WHERE status IN ('pending', 'sending')) AS n",
    )
    .get_result(conn)
    .await?;
    Ok(n.n)
}
