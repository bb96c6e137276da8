//! Request and response bodies of the HTTP API: the wire contract, kept apart from database
//! rows so a schema change never silently changes the API.
//!
//! One submodule per group of endpoints (uploads, videos, live, webhooks, events, health);
//! each keeps the OpenAPI schemas of its fixed values beside the fields that use them. The
//! routes and the OpenAPI document name the types re-exported here.

mod events;
mod health;
mod live;
mod uploads;
mod videos;
mod webhooks;

pub use events::{EventPageDto, EventSchema, EventsQuery};
pub use health::{HEALTH_OK, HealthDto, READY, ReadinessDto, UNAVAILABLE};
pub use live::{RecordingDto, SegmentCountsDto};
pub use uploads::{
    CreateUploadRequest, CreateUploadResponse, CreateVidqUploadResponse, CreatedUploadDto,
    UploadStatusDto,
};
pub use videos::{
    ListVideosQuery, PlaybackDto, ProgressDto, VideoDto, VideoErrorDto, VideoListDto,
};
pub use webhooks::{
    CreateWebhookRequest, DeliveriesQuery, DeliveryDto, DeliveryListDto, DeliveryTryDto, ResendDto,
    WebhookDto, WebhookListDto,
};

#[cfg(test)]
mod tests {
    //! The wire keys are the contract: these tests pin them, whatever the rows behind them.

    use chrono::Utc;
    use serde::Serialize;

    use super::*;
    use crate::app::videos::{VideoFacts, VideoView};
    use crate::app::webhooks::{Delivery, DeliveryTry, Endpoint};
    use crate::domain::video::VideoStatus;

    fn keys(value: &impl Serialize) -> Vec<String> {
        let json = serde_json::to_value(value).unwrap();
        let mut keys: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    }

    #[test]
    fn a_size_may_be_written_as_a_whole_float_but_not_as_a_fraction_or_text() {
        let parse = |size: &str| {
            serde_json::from_str::<CreateUploadRequest>(&format!(
                r#"{{"filename": "a.mp4", "content_type": "video/mp4", "size_bytes": {size}}}"#
            ))
            .map(|r| r.size_bytes)
        };
        assert_eq!(parse("813").unwrap(), 813);
        assert_eq!(parse("813.0").unwrap(), 813);
        assert_eq!(parse("-5").unwrap(), -5);
        for bad in ["813.5", "\"813\"", "1e300", "9223372036854775808"] {
            let body = format!(
                r#"{{"filename": "a.mp4", "content_type": "video/mp4", "size_bytes": {bad}}}"#
            );
            let err = parse(bad).unwrap_err();
            assert_eq!(
                crate::http::json::describe(&err, body.as_bytes()),
                "the field `size_bytes` must be a whole number",
                "{bad}"
            );
        }
    }

    #[test]
    fn a_video_shows_the_documented_fields() {
        let view = VideoView {
            video: VideoFacts {
                id: uuid::Uuid::now_v7(),
                upload_id: Some(uuid::Uuid::now_v7()),
                recording_id: None,
                duration_ms: Some(1000),
                width: Some(640),
                height: Some(360),
                error_code: None,
                error_message: None,
                created_at: Utc::now(),
                ready_at: None,
            },
            status: VideoStatus::Queued,
            attempts: 0,
            playback: None,
            progress: None,
        };
        assert_eq!(
            keys(&VideoDto::new(view, "http://vidq.test")),
            [
                "attempts",
                "created_at",
                "duration_ms",
                "error",
                "height",
                "id",
                "playback",
                "ready_at",
                "source",
                "status",
                "upload_id",
                "width"
            ]
        );
    }

    #[test]
    fn an_endpoint_and_its_deliveries_show_the_documented_fields() {
        let endpoint = Endpoint {
            id: uuid::Uuid::now_v7(),
            url: "https://example.com/hooks".into(),
            event_types: Some(vec!["video.ready".into()]),
            disabled_at: None,
            disabled_reason: None,
            created_at: Utc::now(),
        };
        let dto = WebhookDto::from(endpoint);
        assert_eq!(dto.status, "active");
        assert_eq!(
            keys(&dto),
            ["created_at", "event_types", "id", "status", "url"]
        );
        let list = DeliveryListDto::from(vec![Delivery {
            id: 7,
            event_id: uuid::Uuid::now_v7(),
            event_type: "video.ready".into(),
            status: crate::domain::delivery::DeliveryStatus::Delivered,
            attempts: 1,
            next_attempt_at: None,
            last_error: None,
            delivered_at: Some(Utc::now()),
            tries: vec![DeliveryTry {
                attempt: 1,
                relay_id: "relay-a".into(),
                started_at: Utc::now(),
                finished_at: Utc::now(),
                response_status: Some(200),
                error: None,
            }],
        }]);
        assert_eq!(
            keys(&list.deliveries[0]),
            [
                "attempts",
                "delivered_at",
                "event_id",
                "event_type",
                "id",
                "last_error",
                "next_attempt_at",
                "status",
                "tries"
            ]
        );
        assert_eq!(
            keys(&list.deliveries[0].tries[0]),
            [
                "attempt",
                "error",
                "finished_at",
                "relay_id",
                "response_status",
                "started_at"
            ]
        );
    }
}
