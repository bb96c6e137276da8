//! `GET /v1/events`: the caller's events in an order that never skips a late commit.

use std::time::Duration;

use actix_web::{HttpResponse, web};

use crate::app::{self, AppContext};
use crate::db::events::FeedPosition;
use crate::domain::event::EventType;
use crate::http::auth::Caller;
use crate::http::dto::{EventPageDto, EventsQuery};
use crate::http::error::ApiError;
use crate::http::openapi::KeyErrors;

/// Default page size.
const DEFAULT_LIMIT: i64 = 100;

/// A page of events after `after`; with `wait`, holds the request until one commits.
#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "events",
    operation_id = "list_events",
    security(("api_key" = [])),
    params(EventsQuery),
    responses(
        (status = 200, description = "A page of events (empty when none came within `wait`).",
            body = EventPageDto),
        KeyErrors,
    ),
)]
pub async fn list(
    ctx: web::Data<AppContext>,
    caller: Caller,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    let after = match query.after.as_deref() {
        None | Some("") => FeedPosition::default(),
        Some(text) => parse_cursor(text)
            .ok_or_else(|| ApiError::bad_request("after is not a cursor this API issued"))?,
    };
    if let Some(t) = query.event_type.as_deref() {
        t.parse::<EventType>()
            .map_err(|unknown| ApiError::bad_request(unknown.to_string()))?;
    }
    let wait = Duration::from_secs(query.wait.unwrap_or(0));
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let (events, next) = app::events::page(
        &ctx,
        caller.0,
        after,
        query.event_type.as_deref(),
        limit,
        wait,
    )
    .await?;
    Ok(HttpResponse::Ok().json(EventPageDto {
        events,
        next_cursor: format_cursor(next),
    }))
}

/// `"{xid}-{id}"`: opaque to clients, stable across releases.
pub fn format_cursor(position: FeedPosition) -> String {
    format!("{}-{}", position.xid, position.id)
}

/// Reads a cursor [`format_cursor`] wrote.
pub fn parse_cursor(text: &str) -> Option<FeedPosition> {
    let (xid, id) = text.split_once('-')?;
    Some(FeedPosition {
        xid: xid.parse().ok()?,
        id: i64::try_from(id.parse::<u64>().ok()?).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let position = FeedPosition {
            xid: 7_000_000_001,
            id: 42,
        };
        assert_eq!(parse_cursor(&format_cursor(position)), Some(position));
        for bad in ["", "12", "a-1", "1-b", "-1-2", "1--2"] {
            assert_eq!(parse_cursor(bad), None, "{bad}");
        }
    }
}
