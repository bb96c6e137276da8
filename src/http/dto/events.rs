//! Bodies of the event feed (`GET /v1/events`): its query, a page, and the shape of one event
//! for the OpenAPI document.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::domain::event::EventType;

/// `GET /v1/events` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// `next_cursor` of the previous page; the beginning of the retained feed when absent
    /// or empty.
    #[param(pattern = r"^(?:[0-9]{1,19}-[0-9]{1,18})?$")]
    pub after: Option<String>,
    /// Page size, 1-1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Only this type.
    #[serde(rename = "type")]
    #[param(value_type = Option<EventType>)]
    pub event_type: Option<String>,
    /// Long-poll: wait up to this many seconds (at most 30) for an event when none is ready.
    #[param(maximum = 30)]
    pub wait: Option<u64>,
}

/// `GET /v1/events` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventPageDto {
    /// Events in feed order, each the versioned envelope.
    #[schema(value_type = Vec<EventSchema>)]
    pub events: Vec<serde_json::Value>,
    /// Pass as `after` to continue; the same cursor when the page is empty.
    pub next_cursor: String,
}

/// The shape of one event in the feed ([`crate::domain::event::Event`] as stored in the
/// outbox): only the OpenAPI document uses it, the feed hands out the stored JSON.
#[derive(ToSchema)]
#[schema(as = Event)]
#[allow(dead_code)]
pub struct EventSchema {
    /// Stable across every delivery try (`webhook-id`).
    #[schema(format = Uuid)]
    id: String,
    /// What happened.
    #[schema(value_type = EventType)]
    r#type: String,
    /// When the producing transaction ran.
    occurred_at: DateTime<Utc>,
    /// The video it is about.
    #[schema(format = Uuid)]
    video_id: String,
    /// Type-specific facts; every `data` carries `run`.
    #[schema(value_type = Object)]
    data: serde_json::Value,
}
