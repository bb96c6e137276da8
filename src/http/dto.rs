//! Request and response bodies of the HTTP API: the wire contract, kept apart from database
//! rows so a schema change never silently changes the API.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::app::uploads::CreatedUpload;
use crate::app::videos::VideoView;
use crate::domain::video::VideoStatus;

/// `POST /v1/uploads`.
#[derive(Debug, Deserialize)]
pub struct CreateUploadRequest {
    /// The client's filename (a label; never part of a key).
    pub filename: String,
    /// The video's media type, e.g. `video/mp4`.
    pub content_type: String,
    /// Exact size of the file in bytes.
    pub size_bytes: i64,
}

/// `201` answer to `POST /v1/uploads`.
#[derive(Debug, Serialize)]
pub struct CreateUploadResponse {
    /// Confirm with `POST /v1/uploads/{upload_id}/confirm` after the PUT.
    pub upload_id: String,
    /// Presigned S3 URL to PUT the file to.
    pub upload_url: String,
    /// Always `PUT`.
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
            upload_url: created.presigned.url,
            method: "PUT",
            headers: created.presigned.headers.into_iter().collect(),
            expires_at: created.upload.expires_at,
        }
    }
}

/// Playback URLs of a ready video.
#[derive(Debug, Serialize)]
pub struct PlaybackDto {
    /// HLS playlist.
    pub hls_url: Option<String>,
    /// Progressive MP4.
    pub mp4_url: Option<String>,
    /// Thumbnail JPEG.
    pub thumbnail_url: Option<String>,
}

/// Why a video failed.
#[derive(Debug, Serialize)]
pub struct VideoErrorDto {
    /// Stable code (`invalid_media`, `too_long`...).
    pub code: String,
    /// Human-readable detail.
    pub message: String,
}

/// A video's status.
#[derive(Debug, Serialize)]
pub struct VideoDto {
    /// Video id.
    pub id: String,
    /// The upload it was made from.
    pub upload_id: String,
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

impl From<VideoView> for VideoDto {
    fn from(view: VideoView) -> Self {
        let video = view.video;
        let error = video.error_code.map(|code| VideoErrorDto {
            code,
            message: video.error_message.unwrap_or_default(),
        });
        Self {
            id: video.id.to_string(),
            upload_id: video.upload_id.to_string(),
            status: view.status,
            attempts: view.attempts,
            duration_ms: video.duration_ms,
            width: video.width,
            height: video.height,
            created_at: video.created_at,
            ready_at: video.ready_at,
            playback: view.playback.map(|p| PlaybackDto {
                hls_url: p.hls_url,
                mp4_url: p.mp4_url,
                thumbnail_url: p.thumbnail_url,
            }),
            error,
        }
    }
}

/// `GET /v1/videos` query.
#[derive(Debug, Deserialize)]
pub struct ListVideosQuery {
    /// Only videos in this status.
    pub status: Option<String>,
    /// Page size, 1-100 (default 20).
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A page of videos.
#[derive(Debug, Serialize)]
pub struct VideoListDto {
    /// Newest first.
    pub videos: Vec<VideoDto>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}
