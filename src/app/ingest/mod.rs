//! Uploads through vidq: a contract whose bytes the client sends to vidq (tus at
//! `/v1/tus/`, or one `PUT /v1/uploads/{id}/content`) instead of to a presigned S3 URL.
//!
//! The bytes stream into a spool file under the node's allowed root (docs/architecture.md,
//! "Upload recovery"); each request's bytes are fsynced before the ledger counts them (a CAS
//! on the previous count), and the request that completes the file moves the row
//! `receiving -> pending` and wakes this node's sweeper, which PUTs the contracted key and
//! confirms. Nothing more is asked of the client.
//!
//! The `s3` store ([`crate::app::ingest_s3`]) keeps the bytes in an S3 multipart upload
//! instead; the contract, the checks a request passes and the answers are the same for both.
//! This file holds what the steps share (taking an upload, the answers when its spool file or
//! its row went away); the steps live in `contract` (create, status, terminate), `admit`
//! (the checks), and `receive` (a request's bytes).

use std::time::Duration;

use chrono::Utc;

use super::upload_locks::UploadGuard;
use super::{AppContext, AppError};
use crate::adapters::spool::AppendError;
use crate::app::ReceiveError;
use crate::db;
use crate::domain::ids::{UploadId, UserId};
use crate::domain::upload::{RejectReason, UploadState, UploadStore, UploadVia};

mod admit;
mod contract;
mod receive;
mod settings;
mod types;

pub(super) use admit::Admitted;
pub use contract::{create, resume_point, status, terminate};
pub use receive::receive;
pub use settings::{Ingest, LiveIngestAt};
pub use types::{BodyError, Receive, Received, ReceivingUpload, UploadStatus};

/// How long a new request waits for one that holds the same upload to let go.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// This node's ingest, or the error of a node that takes no uploads through vidq.
fn ingest(ctx: &AppContext) -> Result<&Ingest, AppError> {
    ctx.ingest
        .as_ref()
        .ok_or(AppError::Receive(ReceiveError::IngestDisabled))
}

/// The upload keeps its bytes in S3's multipart upload (the `s3` store).
fn is_s3(status: &UploadStatus) -> bool {
    status.row.store == Some(UploadStore::S3)
}

/// Locks the upload on this node and reads it: only an upload through vidq of this caller,
/// spooled on this node (or in S3's multipart upload, which any node serves), still open.
async fn take(
    ctx: &AppContext,
    owner: UserId,
    id: UploadId,
) -> Result<(UploadStatus, UploadGuard), AppError> {
    let ingest = ingest(ctx)?;
    let guard = ingest
        .locks
        .acquire(id.0, TAKEOVER_WAIT)
        .await
        .ok_or(AppError::Receive(ReceiveError::UploadBusy))?;
    let status = status(ctx, owner, id).await?;
    if status.via != UploadVia::Vidq {
        return Err(AppError::Receive(ReceiveError::NotThroughVidq));
    }
    if !is_s3(&status) && status.row.node_id.as_deref() != Some(&ingest.node_id) {
        return Err(AppError::Receive(ReceiveError::WrongNode {
            node: status.row.node_id.clone().unwrap_or_default(),
        }));
    }
    match status.state {
        UploadState::Expired | UploadState::Rejected => {
            return Err(AppError::Receive(ReceiveError::UploadGone {
                state: status.state,
            }));
        }
        UploadState::Receiving if status.row.expires_at < Utc::now() => {
            return Err(AppError::Receive(ReceiveError::UploadGone {
                state: UploadState::Expired,
            }));
        }
        _ => {}
    }
    Ok((status, guard))
}

/// Why an upload that was open a moment ago no longer is, from its row.
async fn closed(ctx: &AppContext, id: UploadId) -> AppError {
    let state = async {
        let mut conn = ctx.db.get().await?;
        Ok::<_, AppError>(db::uploads::state_of(&mut conn, id).await?)
    }
    .await;
    match state {
        Ok(Some(state)) => match state.parse() {
            Ok(state) => AppError::Receive(ReceiveError::UploadGone { state }),
            Err(e) => AppError::Database(db::DbError::from(e)),
        },
        Ok(None) => AppError::NotFound,
        Err(error) => error,
    }
}

/// The spool file is gone or shorter than the ledger's count: the bytes cannot be
/// resumed. The row is rejected (`spool_missing`) so the client sees why.
async fn lose(ctx: &AppContext, id: UploadId) -> Result<(), AppError> {
    tracing::warn!(upload_id = %id, "the spool file of an upload in progress is lost");
    let mut conn = ctx.db.get().await?;
    db::uploads::receiving::reject_receiving(&mut conn, id, RejectReason::SpoolMissing).await?;
    Ok(())
}

pub(crate) fn spool_error(error: AppendError) -> AppError {
    match error {
        AppendError::Lost { .. } => AppError::Receive(ReceiveError::SpoolLost),
        AppendError::Busy(full) => AppError::Receive(ReceiveError::SpoolBusy(full)),
        AppendError::Held => AppError::Receive(ReceiveError::UploadBusy),
        AppendError::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            tracing::warn!(
                "the spool disk is full: a write was refused (507); the sweeper frees space as it lands what is there"
            );
            AppError::Receive(ReceiveError::SpoolFull)
        }
        other => AppError::Receive(ReceiveError::Spool(other)),
    }
}
