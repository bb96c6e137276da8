//! Bodies of the live endpoints: a recording as `POST /v1/live` and `GET /v1/live/{id}`
//! show it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

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
    /// Segments received, uploaded to S3, excluded by the cutoff, and lost.
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
    /// Files (segments, or the init segment) that arrived whole but could not be recorded:
    /// the database stayed away longer than the node waits (`VIDQ_LIVE_DB_PATIENCE_SECS`).
    /// Their encoder was answered 503; 0 on a healthy day.
    pub lost: i64,
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
                lost: i64::from(row.lost_files),
            },
            init_uploaded: status.counts.init_uploaded,
            end_reason: row.end_reason.map(|r| r.to_string()),
            ended_at: row.ended_at,
            cutoff_at: row.cutoff_at,
            video_id: status.video_id.map(|v| v.to_string()),
            created_at: row.created_at,
        }
    }
}
