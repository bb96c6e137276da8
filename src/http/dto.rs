//! Request and response bodies of the HTTP API: the wire contract, kept apart from database
//! rows so a schema change never silently changes the API.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::app::uploads::CreatedUpload;
use crate::app::videos::VideoView;
use crate::app::webhooks::{Delivery, DeliveryTry, Endpoint};
use crate::domain::event::EventType;
use crate::domain::upload::UploadVia;
use crate::domain::video::VideoStatus;
use crate::http::openapi::one_of;

/// `POST /v1/uploads`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateUploadRequest {
    /// The client's filename (a label; never part of a key): 1-255 characters once
    /// surrounding whitespace is trimmed, no control characters.
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub filename: String,
    /// The video's media type, e.g. `video/mp4` (any case, parameters allowed).
    #[schema(schema_with = content_types)]
    pub content_type: String,
    /// Exact size of the file in bytes; at most the server's upload limit (`Tus-Max-Size`).
    #[serde(deserialize_with = "whole_number")]
    #[schema(minimum = 1)]
    pub size_bytes: i64,
    /// `presigned` (default): PUT the bytes straight to S3. `vidq`: PUT them to vidq
    /// (`PUT /v1/uploads/{upload_id}/content`), which lands them in S3 and confirms.
    #[serde(default)]
    #[schema(value_type = Option<UploadVia>)]
    pub via: Option<String>,
    /// For `"via": "vidq"` only: `sha256:<hex>` (or `sha1:<hex>`) of the whole file; a
    /// PUT whose bytes do not match is refused and nothing is kept.
    #[serde(default)]
    #[schema(pattern = r"^(?:sha1:[0-9a-fA-F]{40}|sha256:[0-9a-fA-F]{64})$")]
    pub checksum: Option<String>,
}

/// `201` answer to `POST /v1/uploads`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreateUploadResponse {
    /// Confirm with `POST /v1/uploads/{upload_id}/confirm` after the PUT.
    #[schema(format = Uuid)]
    pub upload_id: String,
    /// Always `presigned`.
    #[schema(schema_with = presigned_via)]
    pub via: &'static str,
    /// Presigned S3 URL to PUT the file to.
    pub upload_url: String,
    /// Always `PUT`.
    #[schema(schema_with = put_method)]
    pub method: &'static str,
    /// Headers the PUT must carry (they are part of the signature).
    pub headers: BTreeMap<String, String>,
    /// When `upload_url` stops working.
    pub expires_at: DateTime<Utc>,
}

impl From<CreatedUpload> for CreateUploadResponse {
    fn from(created: CreatedUpload) -> Self {
        Self {
            upload_id: created.upload.id.to_string(),
            via: UploadVia::Presigned.as_str(),
            upload_url: created.presigned.url,
            method: "PUT",
            headers: created.presigned.headers.into_iter().collect(),
            expires_at: created.upload.expires_at,
        }
    }
}

/// A whole number, written `813` or `813.0`: JSON Schema's `integer` (the document's
/// type) takes both, and a client's JSON library may write either. A fraction, or a value
/// out of range, is refused as an `i64` field refuses it.
fn whole_number<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    struct Whole;

    impl serde::de::Visitor<'_> for Whole {
        type Value = i64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            // serde's name of the kind, which the JSON extractor turns into a sentence.
            f.write_str("i64")
        }

        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
        }

        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<i64, E> {
            // 2^63 is exact in f64; every whole f64 below it (and at or above -2^63) fits.
            const LIMIT: f64 = 9_223_372_036_854_775_808.0;
            if v.fract() == 0.0 && (-LIMIT..LIMIT).contains(&v) {
                Ok(v as i64)
            } else {
                Err(E::invalid_value(serde::de::Unexpected::Float(v), &self))
            }
        }
    }

    deserializer.deserialize_any(Whole)
}

/// `201` answer to `POST /v1/uploads`; `via` tells which.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum CreatedUploadDto {
    /// `"via": "presigned"`: PUT the file to S3, then confirm.
    Presigned(CreateUploadResponse),
    /// `"via": "vidq"`: PUT the file to vidq, which confirms it.
    Vidq(CreateVidqUploadResponse),
}

/// `201` answer to `POST /v1/uploads` with `"via": "vidq"`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreateVidqUploadResponse {
    /// `GET /v1/uploads/{upload_id}` shows its progress.
    #[schema(format = Uuid)]
    pub upload_id: String,
    /// Always `vidq`.
    #[schema(schema_with = vidq_via)]
    pub via: &'static str,
    /// PUT the whole file here, with the API key; vidq confirms it when it is in S3.
    pub upload_url: String,
    /// Always `PUT`.
    #[schema(schema_with = put_method)]
    pub method: &'static str,
    /// Headers the PUT must carry besides `Authorization`.
    pub headers: BTreeMap<String, String>,
    /// After this the upload is `expired` if its bytes have not all arrived.
    pub expires_at: DateTime<Utc>,
}

/// `GET /v1/uploads/{upload_id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct UploadStatusDto {
    /// The upload.
    pub upload_id: String,
    /// `receiving | pending | uploaded | confirmed | rejected | expired`.
    #[schema(value_type = crate::domain::upload::UploadState)]
    pub state: String,
    /// `presigned` or `vidq`.
    #[schema(value_type = UploadVia)]
    pub via: String,
    /// The client's filename.
    pub filename: String,
    /// The media type.
    pub content_type: String,
    /// Declared size.
    pub size_bytes: i64,
    /// Bytes vidq holds (uploads through vidq), or the size once in S3.
    pub received_bytes: i64,
    /// Why it was rejected, if it was.
    pub reject_reason: Option<String>,
    /// The video made from it, once confirmed.
    pub video_id: Option<String>,
    /// When an unfinished upload expires.
    pub expires_at: DateTime<Utc>,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

impl From<crate::app::ingest::UploadStatus> for UploadStatusDto {
    fn from(status: crate::app::ingest::UploadStatus) -> Self {
        let received_bytes = status.received_bytes();
        let row = status.row;
        Self {
            upload_id: row.id.to_string(),
            state: status.state.as_str().to_owned(),
            via: status.via.as_str().to_owned(),
            filename: row.filename,
            content_type: row.content_type,
            size_bytes: row.declared_size,
            received_bytes,
            reject_reason: row.reject_reason,
            video_id: status.video_id.map(|v| v.to_string()),
            expires_at: row.expires_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// A live recording, as `POST /v1/live` and `GET /v1/live/{id}` show it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecordingDto {
    /// The recording.
    pub id: String,
    /// `waiting | live | ending | ended | ready | failed`.
    #[schema(value_type = crate::domain::recording::RecordingState)]
    pub state: String,
    /// Where the encoder PUTs its HLS (`{ingest_url}index.m3u8`); it carries the secret
    /// stream key, so it is only in the answer to `POST /v1/live`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_url: Option<String>,
    /// The RTMP server URL for OBS and other RTMP encoders (`rtmp://{host}:{port}/live`), when
    /// this node runs an RTMP listener; only in the answer to `POST /v1/live`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtmp_url: Option<String>,
    /// The secret stream key: the stream name under `rtmp_url`, and the path segment of
    /// `ingest_url`. Only in the answer to `POST /v1/live` (only its hash is stored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_key: Option<String>,
    /// The live HLS playlist (a signed, expiring token in the URL): nothing playable until
    /// the init segment is in S3, `#EXT-X-ENDLIST` once it has ended and is all there.
    pub playback_url: String,
    /// Segments received, uploaded to S3, and excluded by the cutoff.
    pub segments: SegmentCountsDto,
    /// Whether the init segment is in S3 (nothing plays before it is).
    pub init_uploaded: bool,
    /// Why it ended: `endlist | ended_by_client | idle | expired`.
    #[schema(value_type = Option<crate::domain::recording::EndReason>)]
    pub end_reason: Option<String>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// Files arriving after this are excluded.
    pub cutoff_at: Option<DateTime<Utc>>,
    /// The video it became once it ended whole (`GET /v1/videos/{video_id}`).
    pub video_id: Option<String>,
    /// Created.
    pub created_at: DateTime<Utc>,
}

/// Segment counts of a recording.
#[derive(Debug, Serialize, ToSchema)]
pub struct SegmentCountsDto {
    /// Received (any state).
    pub received: i64,
    /// In S3.
    pub uploaded: i64,
    /// After the cutoff, never PUT.
    pub excluded: i64,
}

impl RecordingDto {
    /// With the secrets only its creation shows: the stream key, and the RTMP URL to use it
    /// with.
    pub fn with_stream_key(mut self, stream_key: String, rtmp_url: Option<String>) -> Self {
        self.stream_key = Some(stream_key);
        self.rtmp_url = rtmp_url;
        self
    }

    /// The wire form; `ingest_url` only when the key is known (at creation).
    pub fn new(
        status: crate::app::live::RecordingStatus,
        ingest_url: Option<String>,
        playback_url: String,
    ) -> Self {
        let row = status.row;
        Self {
            id: row.id.to_string(),
            state: status.state.as_str().to_owned(),
            ingest_url,
            rtmp_url: None,
            stream_key: None,
            playback_url,
            segments: SegmentCountsDto {
                received: status.counts.received,
                uploaded: status.counts.uploaded,
                excluded: status.counts.excluded,
            },
            init_uploaded: status.counts.init_uploaded,
            end_reason: row.end_reason,
            ended_at: row.ended_at,
            cutoff_at: row.cutoff_at,
            video_id: status.video_id.map(|v| v.to_string()),
            created_at: row.created_at,
        }
    }
}

/// Playback URLs of a ready video.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlaybackDto {
    /// HLS playlist: vidq's `/v1/videos/{id}/hls.m3u8?token=...`, or a plain URL under
    /// `VIDQ_PUBLIC_BASE_URL`.
    pub hls_url: Option<String>,
    /// Progressive MP4.
    pub mp4_url: Option<String>,
    /// Thumbnail JPEG.
    pub thumbnail_url: Option<String>,
}

/// Why a video failed.
#[derive(Debug, Serialize, ToSchema)]
pub struct VideoErrorDto {
    /// Stable code (`invalid_media`, `too_long`...).
    pub code: String,
    /// Human-readable detail.
    pub message: String,
}

/// A video's status.
#[derive(Debug, Serialize, ToSchema)]
pub struct VideoDto {
    /// Video id.
    pub id: String,
    /// The upload it was made from (absent for a live recording's video).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload_id: Option<String>,
    /// The live recording it was made from (absent for an upload's video).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_id: Option<String>,
    /// `upload` or `live`.
    #[schema(schema_with = video_sources)]
    pub source: &'static str,
    /// `queued | processing | ready | failed`.
    pub status: VideoStatus,
    /// Encoding attempts so far (at most 3).
    pub attempts: i32,
    /// Probed duration in milliseconds.
    pub duration_ms: Option<i64>,
    /// Probed width.
    pub width: Option<i32>,
    /// Probed height.
    pub height: Option<i32>,
    /// When the upload was confirmed.
    pub created_at: DateTime<Utc>,
    /// When it became ready.
    pub ready_at: Option<DateTime<Utc>>,
    /// Present once ready.
    pub playback: Option<PlaybackDto>,
    /// Present once failed.
    pub error: Option<VideoErrorDto>,
}

impl VideoDto {
    /// The wire form of a video; `api_base` (`scheme://host` the client reached vidq at)
    /// makes an `hls_url` served by vidq absolute.
    pub fn new(view: VideoView, api_base: &str) -> Self {
        let video = view.video;
        let error = video.error_code.map(|code| VideoErrorDto {
            code,
            message: video.error_message.unwrap_or_default(),
        });
        Self {
            id: video.id.to_string(),
            upload_id: video.upload_id.map(|u| u.to_string()),
            recording_id: video.recording_id.map(|r| r.to_string()),
            source: if video.recording_id.is_some() {
                SOURCE_LIVE
            } else {
                SOURCE_UPLOAD
            },
            status: view.status,
            attempts: view.attempts,
            duration_ms: video.duration_ms,
            width: video.width,
            height: video.height,
            created_at: video.created_at,
            ready_at: video.ready_at,
            playback: view.playback.map(|p| PlaybackDto {
                hls_url: p.hls_url.map(|url| url.resolve(api_base)),
                mp4_url: p.mp4_url,
                thumbnail_url: p.thumbnail_url,
            }),
            error,
        }
    }
}

/// `GET /v1/videos` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListVideosQuery {
    /// Only videos in this status.
    #[param(value_type = Option<VideoStatus>)]
    pub status: Option<String>,
    /// Page size, 1-100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[param(format = Uuid)]
    pub cursor: Option<String>,
}

/// A page of videos.
#[derive(Debug, Serialize, ToSchema)]
pub struct VideoListDto {
    /// Newest first.
    pub videos: Vec<VideoDto>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

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

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthDto {
    /// Always `ok`.
    #[schema(schema_with = ok_status)]
    pub status: &'static str,
}

/// `GET /readyz`: what answers and what does not.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReadinessDto {
    /// `ready` when the node takes requests (the database answers, and the bucket too when
    /// `VIDQ_READY_REQUIRES_STORAGE` is on), else `unavailable`.
    #[schema(schema_with = readiness)]
    pub status: &'static str,
    /// `ok` or `unavailable`.
    #[schema(schema_with = check_verdicts)]
    pub database: &'static str,
    /// `ok` or `unavailable`.
    #[schema(schema_with = check_verdicts)]
    pub storage: &'static str,
}

// Schemas of fields whose values are fixed: the media types the pipeline takes and the
// constants the handlers write.

fn content_types() -> utoipa::openapi::Object {
    one_of(
        crate::domain::upload::ACCEPTED_CONTENT_TYPES
            .iter()
            .copied(),
    )
}

fn vidq_via() -> utoipa::openapi::Object {
    one_of([UploadVia::Vidq.as_str()])
}

fn presigned_via() -> utoipa::openapi::Object {
    one_of([UploadVia::Presigned.as_str()])
}

fn put_method() -> utoipa::openapi::Object {
    one_of(["PUT"])
}

fn video_sources() -> utoipa::openapi::Object {
    one_of([SOURCE_UPLOAD, SOURCE_LIVE])
}

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

fn ok_status() -> utoipa::openapi::Object {
    one_of([HEALTH_OK])
}

fn readiness() -> utoipa::openapi::Object {
    one_of([READY, UNAVAILABLE])
}

fn check_verdicts() -> utoipa::openapi::Object {
    one_of([HEALTH_OK, UNAVAILABLE])
}

/// `source` of a video made from an upload.
const SOURCE_UPLOAD: &str = "upload";
/// `source` of a video made from a live recording.
const SOURCE_LIVE: &str = "live";
/// `status` of an endpoint that receives events.
const ENDPOINT_ACTIVE: &str = "active";
/// `status` of an endpoint that was disabled.
const ENDPOINT_DISABLED: &str = "disabled";
/// What `/healthz` and a check of `/readyz` that answered say.
pub const HEALTH_OK: &str = "ok";
/// `status` of `/readyz` when every check answered.
pub const READY: &str = "ready";
/// What `/readyz` says of itself or of a check that did not answer.
pub const UNAVAILABLE: &str = "unavailable";

#[cfg(test)]
mod tests {
    //! The wire keys are the contract: these tests pin them, whatever the rows behind them.

    use super::*;
    use crate::app::videos::VideoFacts;

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
