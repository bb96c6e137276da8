//! Bodies of the upload endpoints: creating an upload (presigned or through vidq) and
//! reading its status.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::app::uploads::CreatedUpload;
use crate::domain::upload::UploadVia;
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
            reject_reason: row.reject_reason.map(|r| r.to_string()),
            video_id: status.video_id.map(|v| v.to_string()),
            expires_at: row.expires_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
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
