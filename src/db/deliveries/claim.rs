//! Claiming: a relay takes due deliveries under a lease and a fresh token, and gets with
//! each everything needed to send it (the event's bytes, the endpoint as it stands), so a
//! send needs no second read.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    BigInt, Bool, Double, Integer, Nullable, Text, Timestamptz, Uuid as SqlUuid,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::prepared::prepared;
use crate::domain::ids::WebhookId;
use crate::domain::sink::SinkKind;
use crate::domain::upload::UnknownState;

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
    endpoint_id: Option<WebhookId>,
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
    pub id: WebhookId,
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
) -> Result<Vec<ClaimedDelivery>, crate::db::DbError> {
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
