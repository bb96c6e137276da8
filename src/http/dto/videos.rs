//! Bodies of the video endpoints: one video's status (with its playback URLs once ready, its
//! error once failed) and a page of them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::app::videos::VideoView;
use crate::domain::video::VideoStatus;
use crate::http::openapi::one_of;

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

/// How far a long video's encoding is, while its chunks are encoded on the workers.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProgressDto {
    /// Parts encoded (chunks and the audio).
    pub done: i64,
    /// Every part and the stitch that joins them.
    pub total: i64,
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
    /// The encoded video's length in milliseconds: its picture or its sound, whichever runs
    /// longer.
    pub duration_ms: Option<i64>,
    /// The source's displayed width (its rotation applied: a portrait clip is portrait).
    pub width: Option<i32>,
    /// The source's displayed height.
    pub height: Option<i32>,
    /// When the upload was confirmed.
    pub created_at: DateTime<Utc>,
    /// When it became ready.
    pub ready_at: Option<DateTime<Utc>>,
    /// Present once ready.
    pub playback: Option<PlaybackDto>,
    /// Present once failed.
    pub error: Option<VideoErrorDto>,
    /// Present while a long video, split into chunks, is being encoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressDto>,
}

impl VideoDto {
    /// The wire form of a video; `api_base` (`scheme://host` the client reached vidq at)
    /// makes an `hls_url` served by vidq absolute.
    pub fn new(view: VideoView, api_base: &str) -> Self {
        let video = view.video;
        let error = video.error_code.map(|code| VideoErrorDto {
            code: code.to_string(),
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
            progress: view
                .progress
                .map(|(done, total)| ProgressDto { done, total }),
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

// The schema of `source`: the constants the handler writes, so the document lists exactly them.
fn video_sources() -> utoipa::openapi::Object {
    one_of([SOURCE_UPLOAD, SOURCE_LIVE])
}

/// `source` of a video made from an upload.
const SOURCE_UPLOAD: &str = "upload";
/// `source` of a video made from a live recording.
const SOURCE_LIVE: &str = "live";
