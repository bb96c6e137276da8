//! The values the HTTP layer (tus and the single PUT) hands to the ingest and gets back:
//! what a request says about its bytes, what came of them, where an upload stands.

use chrono::{DateTime, Utc};

use crate::db::uploads::UploadRow;
use crate::domain::ids::{UploadId, VideoId};
use crate::domain::tus::Checksum;
use crate::domain::upload::{UploadState, UploadVia};

/// A new upload through vidq waiting for its bytes.
#[derive(Debug, Clone)]
pub struct ReceivingUpload {
    /// The contract's id.
    pub id: UploadId,
    /// Bytes it must receive.
    pub size: u64,
    /// When it expires if not complete.
    pub expires_at: DateTime<Utc>,
}

/// Where an upload stands, as the status endpoint and tus `HEAD` show it.
#[derive(Debug, Clone)]
pub struct UploadStatus {
    /// The row.
    pub row: UploadRow,
    /// Its state.
    pub state: UploadState,
    /// How its bytes reach S3.
    pub via: UploadVia,
    /// The video made from it, once confirmed.
    pub video_id: Option<VideoId>,
}

impl UploadStatus {
    /// Bytes vidq holds of an upload through vidq (a presigned upload's are in S3 or not:
    /// the declared size once confirmed, else 0).
    pub fn received_bytes(&self) -> i64 {
        match (self.via, self.state) {
            (UploadVia::Vidq, _) => self.row.received_bytes,
            (_, UploadState::Confirmed) => self.row.declared_size,
            _ => 0,
        }
    }
}

/// A request body's failure, as the HTTP layer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// The body stopped arriving (the idle limit).
    Idle,
    /// The connection broke.
    Broken,
}

/// How the bytes of one request are to be taken.
#[derive(Debug, Clone)]
pub struct Receive {
    /// tus: the `Upload-Offset` the client claims; `None`: the single PUT, always the whole
    /// file from byte 0.
    pub offset: Option<u64>,
    /// The body's `Content-Length`, when the client said it.
    pub length: Option<u64>,
    /// The client's digest of this request's bytes (tus `Upload-Checksum`).
    pub checksum: Option<Checksum>,
    /// The single PUT's `Content-Type`, when it sent one: it must be the contract's.
    pub content_type: Option<String>,
}

/// What a request's bytes did.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes held now (the next tus offset).
    pub offset: u64,
    /// The whole file has arrived; the sweeper takes it from here.
    pub complete: bool,
    /// When the upload expires if it is not complete by then.
    pub expires_at: DateTime<Utc>,
}
