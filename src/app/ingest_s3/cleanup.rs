//! Multipart uploads nothing will finish: those of uploads that expired, and those of a user
//! being deleted. Aborted (with their tail pieces) so that S3 holds no parts no row names.

use super::tail_prefix;
use crate::app::{AppContext, AppError};
use crate::db::uploads::multiparts;
use crate::domain::ids::UserId;

/// Aborts the multipart uploads of `s3`-store uploads that expired (and of those whose abort
/// failed before); returns how many. Any API node runs it: rows are taken with SKIP LOCKED.
pub async fn expire_due(ctx: &AppContext) -> Result<usize, AppError> {
    let due = {
        let mut conn = ctx.db.get().await?;
        multiparts::expire_due(&mut conn, 100).await?
    };
    let mut dropped = 0;
    for row in &due {
        let aborted = ctx
            .storage
            .abort_multipart(&row.object_key, &row.multipart_id)
            .await;
        let deleted = ctx.storage.delete_prefix(&tail_prefix(row.upload_id)).await;
        match aborted.and(deleted.map(drop)) {
            Ok(()) => {
                let mut conn = ctx.db.get().await?;
                multiparts::forget(&mut conn, row.upload_id).await?;
                dropped += 1;
            }
            Err(error) => {
                tracing::warn!(upload_id = %row.upload_id, error = %crate::telemetry::error_chain(&error), "could not abort an expired upload's multipart upload; the next pass tries again");
            }
        }
    }
    if dropped > 0 {
        tracing::info!(
            count = dropped,
            "expired uploads through vidq: their multipart uploads are aborted"
        );
    }
    Ok(dropped)
}

/// Aborts the multipart uploads (and deletes the tail pieces) of `owner`'s uploads still
/// arriving, before the user's rows go: nothing would name them afterwards. Best effort: what
/// fails is logged (a bucket's `AbortIncompleteMultipartUpload` lifecycle rule is the
/// backstop); returns how many were aborted.
pub async fn abort_all_of(ctx: &AppContext, owner: UserId) -> Result<usize, AppError> {
    let open = {
        let mut conn = ctx.db.get().await?;
        multiparts::of_owner(&mut conn, owner).await?
    };
    let mut aborted = 0;
    for row in &open {
        let done = ctx
            .storage
            .abort_multipart(&row.object_key, &row.multipart_id)
            .await
            .and(
                ctx.storage
                    .delete_prefix(&tail_prefix(row.upload_id))
                    .await
                    .map(drop),
            );
        match done {
            Ok(()) => aborted += 1,
            Err(error) => {
                tracing::warn!(upload_id = %row.upload_id, error = %crate::telemetry::error_chain(&error), "could not abort a deleted user's multipart upload");
            }
        }
    }
    Ok(aborted)
}
