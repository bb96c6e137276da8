//! Outbox events: the versioned envelope every sink and the pull feed carry.
//!
//! `{"id", "type", "occurred_at", "video_id", "data": {...}}`. `id` is minted in the
//! transaction that produces the event and never changes, so consumers can drop repeats.
//! Every `data` carries `run`: an operator retry starts a new run, and each run ends in
//! exactly one terminal event (`video.ready` or `video.failed`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::ids::{EventId, RecordingId, UploadId, VideoId};
use super::job::FIRST_RUN;

/// What happened to a video.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// A confirmed upload became a video and its encoding job was queued.
    #[serde(rename = "video.accepted")]
    VideoAccepted,
    /// Encoded outputs are in S3 and playable.
    #[serde(rename = "video.ready")]
    VideoReady,
    /// The video will not become playable.
    #[serde(rename = "video.failed")]
    VideoFailed,
}

impl EventType {
    /// Every type, in the order a video meets them.
    pub const ALL: &'static [Self] = &[Self::VideoAccepted, Self::VideoReady, Self::VideoFailed];

    /// The wire and database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::VideoAccepted => "video.accepted",
            Self::VideoReady => "video.ready",
            Self::VideoFailed => "video.failed",
        }
    }
}

/// Not an event type vidq produces.
#[derive(Debug, thiserror::Error)]
#[error("unknown event type {0:?}; use video.accepted, video.ready or video.failed")]
pub struct UnknownEventType(pub String);

impl std::str::FromStr for EventType {
    type Err = UnknownEventType;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == text)
            .ok_or_else(|| UnknownEventType(text.to_owned()))
    }
}

/// Why an endpoint's `event_types` list is refused.
#[derive(Debug, thiserror::Error)]
pub enum EventTypesError {
    /// An empty list would subscribe to nothing; leaving the field out means every type.
    #[error("event_types must list at least one type, or be left out for every type")]
    Empty,
    /// A name vidq does not produce.
    #[error(transparent)]
    Unknown(#[from] UnknownEventType),
    /// The same type twice: a list is a set, and a repeat most likely hides a typo.
    #[error("event_types lists {0:?} more than once")]
    Duplicate(String),
}

/// Checks an endpoint's `event_types`: at least one, each known, none twice.
pub fn check_event_types(types: &[String]) -> Result<(), EventTypesError> {
    if types.is_empty() {
        return Err(EventTypesError::Empty);
    }
    let mut seen = Vec::with_capacity(types.len());
    for text in types {
        let event_type = text.parse::<EventType>()?;
        if seen.contains(&event_type) {
            return Err(EventTypesError::Duplicate(text.clone()));
        }
        seen.push(event_type);
    }
    Ok(())
}

/// How `occurred_at` is written: RFC 3339, UTC, always six fractional digits. A finalize
/// has the database write it (`db::deliveries::outbox::insert_stamped`, with `to_char` and this pattern)
/// so the whole transaction can go out in one round trip.
pub const OCCURRED_AT_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6fZ";

fn utc_micros<S: serde::Serializer>(at: &DateTime<Utc>, out: S) -> Result<S::Ok, S::Error> {
    out.collect_str(&at.format(OCCURRED_AT_FORMAT))
}

/// One event, as stored in the outbox and sent to consumers.
#[derive(Clone, Debug, Serialize)]
pub struct Event {
    /// Stable across every delivery try.
    pub id: EventId,
    /// What happened.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// When the producing transaction ran, in UTC to the microsecond (PostgreSQL's
    /// precision), written the same way whether vidq or the database fills it in.
    #[serde(serialize_with = "utc_micros")]
    pub occurred_at: DateTime<Utc>,
    /// The video it is about.
    pub video_id: VideoId,
    /// Type-specific facts, enough to act without calling back.
    pub data: Value,
}

impl Event {
    /// `video.accepted`: the upload is confirmed and the video is queued for encoding.
    pub fn video_accepted(
        video_id: VideoId,
        upload_id: UploadId,
        occurred_at: DateTime<Utc>,
    ) -> Self {
        Self {
            id: EventId::new(),
            event_type: EventType::VideoAccepted,
            occurred_at,
            video_id,
            data: serde_json::json!({ "status": "queued", "upload_id": upload_id, "run": FIRST_RUN }),
        }
    }

    /// `video.accepted` of a live recording: it has ended with its init and segments in S3,
    /// and its repackage job is queued.
    pub fn video_accepted_from_recording(
        video_id: VideoId,
        recording_id: RecordingId,
        occurred_at: DateTime<Utc>,
    ) -> Self {
        Self {
            id: EventId::new(),
            event_type: EventType::VideoAccepted,
            occurred_at,
            video_id,
            data: serde_json::json!({
                "status": "queued",
                "source": "live",
                "recording_id": recording_id,
                "run": FIRST_RUN,
            }),
        }
    }

    /// `video.ready`: outputs are in S3; `data` carries the probe facts and the object keys,
    /// and gets the run that made them.
    pub fn video_ready(
        video_id: VideoId,
        run: i32,
        occurred_at: DateTime<Utc>,
        mut data: Value,
    ) -> Self {
        if let Value::Object(fields) = &mut data {
            fields.insert("run".to_owned(), run.into());
        }
        Self {
            id: EventId::new(),
            event_type: EventType::VideoReady,
            occurred_at,
            video_id,
            data,
        }
    }

    /// `video.failed`: this run will not make the video playable; `data` says why, with a
    /// code and the message a client may read (never a node's paths).
    pub fn video_failed(
        video_id: VideoId,
        run: i32,
        occurred_at: DateTime<Utc>,
        code: &str,
        message: &str,
    ) -> Self {
        Self {
            id: EventId::new(),
            event_type: EventType::VideoFailed,
            occurred_at,
            video_id,
            data: serde_json::json!({
                "status": "failed",
                "run": run,
                "error": { "code": code, "message": message },
            }),
        }
    }

    /// The envelope as JSON, as stored in the outbox's `payload`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("an event always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Timelike;

    #[test]
    fn occurred_at_is_utc_with_six_fractional_digits_like_the_database_writes_it() {
        let at = DateTime::parse_from_rfc3339("2026-12-01T13:04:05.120000789+02:00")
            .unwrap()
            .with_timezone(&Utc);
        let json = Event::video_accepted(VideoId::new(), UploadId::new(), at).to_json();
        assert_eq!(json["occurred_at"], "2026-12-01T11:04:05.120000Z");
        let whole = at.with_nanosecond(0).unwrap();
        let json = Event::video_accepted(VideoId::new(), UploadId::new(), whole).to_json();
        assert_eq!(json["occurred_at"], "2026-12-01T11:04:05.000000Z");
    }

    #[test]
    fn accepted_event_has_the_documented_envelope() {
        let video = VideoId::new();
        let upload = UploadId::new();
        let event = Event::video_accepted(video, upload, Utc::now());
        let json = event.to_json();
        assert_eq!(json["type"], "video.accepted");
        assert_eq!(json["video_id"], video.to_string());
        assert_eq!(json["id"], event.id.to_string());
        assert_eq!(json["data"]["status"], "queued");
        assert_eq!(json["data"]["upload_id"], upload.to_string());
        assert_eq!(json["data"]["run"], 1);
        assert!(json["occurred_at"].is_string());
    }

    #[test]
    fn terminal_events_name_their_run() {
        let video = VideoId::new();
        let ready =
            Event::video_ready(video, 2, Utc::now(), serde_json::json!({"status": "ready"}));
        assert_eq!(ready.to_json()["data"]["run"], 2);
        assert_eq!(ready.to_json()["data"]["status"], "ready");
        let failed = Event::video_failed(video, 1, Utc::now(), "too_long", "too long");
        assert_eq!(failed.to_json()["data"]["run"], 1);
        assert_eq!(failed.to_json()["data"]["error"]["code"], "too_long");
    }

    #[test]
    fn event_type_lists_are_non_empty_known_and_without_repeats() {
        let list = |types: &[&str]| types.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert!(check_event_types(&list(&["video.ready", "video.failed"])).is_ok());
        assert!(matches!(
            check_event_types(&[]),
            Err(EventTypesError::Empty)
        ));
        assert!(matches!(
            check_event_types(&list(&["video.ready", "video.exploded"])),
            Err(EventTypesError::Unknown(_))
        ));
        assert!(matches!(
            check_event_types(&list(&["video.ready", "video.failed", "video.ready"])),
            Err(EventTypesError::Duplicate(t)) if t == "video.ready"
        ));
    }
}
