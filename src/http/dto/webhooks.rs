//! Bodies of the webhook endpoints: registering and listing endpoints, resending an event,
//! and an endpoint's delivery log with its tries.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::app::webhooks::{Delivery, DeliveryTry, Endpoint};
use crate::domain::event::EventType;
use crate::http::openapi::one_of;

/// `POST /v1/webhooks`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateWebhookRequest {
    /// Where to POST events (http or https, a public address).
    #[schema(format = "uri")]
    pub url: String,
    /// Only these types (at least one, none twice); every type when left out.
    #[schema(schema_with = event_type_set_or_null)]
    pub event_types: Option<Vec<String>>,
}

/// A webhook endpoint. `secret` only appears when it is created or rotated.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookDto {
    /// Endpoint id.
    pub id: String,
    /// Destination.
    pub url: String,
    /// Types it receives; `null` is every type.
    #[schema(schema_with = event_type_set_or_null)]
    pub event_types: Option<Vec<String>>,
    /// `active` or `disabled`.
    #[schema(schema_with = endpoint_statuses)]
    pub status: &'static str,
    /// Why it was disabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
    /// The signing secret (`whsec_...`); keep it, it is not shown again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// After a rotation: until when the old secret also signs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
}

impl From<Endpoint> for WebhookDto {
    fn from(endpoint: Endpoint) -> Self {
        Self {
            id: endpoint.id.to_string(),
            url: endpoint.url,
            event_types: endpoint.event_types,
            status: if endpoint.disabled_at.is_some() {
                ENDPOINT_DISABLED
            } else {
                ENDPOINT_ACTIVE
            },
            disabled_reason: endpoint.disabled_reason,
            created_at: endpoint.created_at,
            secret: None,
            previous_secret_expires_at: None,
        }
    }
}

/// `GET /v1/webhooks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookListDto {
    /// Oldest first.
    pub webhooks: Vec<WebhookDto>,
}

/// `202` answer to a resend.
#[derive(Debug, Serialize, ToSchema)]
pub struct ResendDto {
    /// The new delivery (same event id on the wire).
    pub delivery_id: i64,
}

/// `?limit=` of the delivery log.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// At most this many deliveries (1-100, default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
}

/// One try of a delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryTryDto {
    /// Try number.
    pub attempt: i32,
    /// Relay that made it.
    pub relay_id: String,
    /// Start.
    pub started_at: DateTime<Utc>,
    /// End.
    pub finished_at: DateTime<Utc>,
    /// The receiver's status code, if it answered.
    pub response_status: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
}

/// One delivery of an event to the endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryDto {
    /// Delivery id.
    pub id: i64,
    /// The event (`webhook-id`).
    pub event_id: String,
    /// Its type.
    #[schema(value_type = EventType)]
    pub event_type: String,
    /// pending, sending, delivered, exhausted or discarded.
    #[schema(value_type = crate::domain::delivery::DeliveryStatus)]
    pub status: &'static str,
    /// Tries started.
    pub attempts: i32,
    /// When the next try is due, while pending.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Last failure.
    pub last_error: Option<String>,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// Every logged try, oldest first.
    pub tries: Vec<DeliveryTryDto>,
}

/// `GET /v1/webhooks/{id}/deliveries`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryListDto {
    /// Newest first.
    pub deliveries: Vec<DeliveryDto>,
}

impl From<Vec<Delivery>> for DeliveryListDto {
    fn from(deliveries: Vec<Delivery>) -> Self {
        let deliveries = deliveries
            .into_iter()
            .map(|d| DeliveryDto {
                id: d.id,
                event_id: d.event_id.to_string(),
                event_type: d.event_type,
                status: d.status.as_str(),
                attempts: d.attempts,
                next_attempt_at: d.next_attempt_at,
                last_error: d.last_error,
                delivered_at: d.delivered_at,
                tries: d.tries.into_iter().map(DeliveryTryDto::from).collect(),
            })
            .collect();
        Self { deliveries }
    }
}

impl From<DeliveryTry> for DeliveryTryDto {
    fn from(t: DeliveryTry) -> Self {
        Self {
            attempt: t.attempt,
            relay_id: t.relay_id,
            started_at: t.started_at,
            finished_at: t.finished_at,
            response_status: t.response_status,
            error: t.error,
        }
    }
}

// Schemas of fields whose values are fixed: the constants the handlers write, and a set of
// event types that may also be `null` (every type).
fn endpoint_statuses() -> utoipa::openapi::Object {
    one_of([ENDPOINT_ACTIVE, ENDPOINT_DISABLED])
}

fn event_type_set_or_null() -> utoipa::openapi::schema::Array {
    utoipa::openapi::schema::ArrayBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([
            utoipa::openapi::schema::Type::Array,
            utoipa::openapi::schema::Type::Null,
        ]))
        .items(utoipa::openapi::Ref::from_schema_name("EventType"))
        .min_items(Some(1))
        .unique_items(true)
        .build()
}

/// `status` of an endpoint that receives events.
const ENDPOINT_ACTIVE: &str = "active";
/// `status` of an endpoint that was disabled.
const ENDPOINT_DISABLED: &str = "disabled";
