//! The `s3` tus store (`VIDQ_TUS_STORE=s3`): an upload through vidq is an S3 multipart
//! upload on its final key (`originals/{id}`), and its offset, parts and tail live in the
//! ledger (`db::uploads::multiparts`), so any API node takes any of its requests and the upload
//! outlives the node that began it.
//!
//! A request takes the upload (a lease, renewed while its bytes move; one request at a time)
//! and streams its body through a small channel into parts of the upload's part size. Bytes
//! past the last whole part become a tail piece, a small object of their own; the next part
//! takes the pieces in first, so a client may send any chunk size, and each byte is written
//! once as a piece and read once into its part. Each part or piece is counted by a CAS after
//! S3 holds it; with a checksum (or for the single PUT, all or nothing) everything is counted
//! at the end, once the digest matched. The request that completes the file completes the
//! multipart upload and confirms it (video, job, `video.accepted`) itself: no sweeper.
//!
//! This file holds an upload's life apart from its bytes (create, resume, finish,
//! terminate); a request's bytes are in `receive`, with the body reader in `feed` and what
//! it writes to S3 in `writer`; `cleanup` aborts what nothing will finish.

use std::time::Duration;

use super::ingest::UploadStatus;
use super::{AppContext, AppError};
use crate::adapters::storage::{Completed, StorageError};
use crate::app::ReceiveError;
use crate::db::{self, uploads::multiparts};
use crate::domain::ids::UploadId;
use crate::domain::upload::UploadState;

mod cleanup;
mod feed;
mod receive;
mod writer;

pub use cleanup::{abort_all_of, expire_due};
pub(super) use receive::receive;

/// How often a request renews its lease while it holds the upload.
const RENEW_EVERY: Duration = Duration::from_secs(5);
/// S3's smallest part: the part numbers a request reserves are counted by it (an upload's
/// own part size is at least this).
const MIN_PART: u64 = 5 * 1024 * 1024;
/// Where tail pieces live.
pub const TAIL_PREFIX: &str = "tus-tail/";

/// The prefix of an upload's tail pieces.
pub fn tail_prefix(upload: UploadId) -> String {
    format!("{TAIL_PREFIX}{upload}/")
}

/// Counts the owner's open uploads against `cap` under their lock, then starts the multipart
/// upload and records the `receiving` contract with it, in that one transaction: a refused
/// create opens nothing in S3, and a row never names a multipart upload that does not exist.
pub(super) async fn create(
    ctx: &AppContext,
    contract: &db::uploads::NewUploadRow<'_>,
    part_bytes: u64,
    cap: u32,
) -> Result<(), AppError> {
    use crate::app::open_work::{self, OpenWork};
    use diesel_async::AsyncConnection as _;
    let owner = contract.owner_id;
    let mut opened = None;
    let mut conn = ctx.db.get().await?;
    let recorded = conn
        .transaction::<_, AppError, _>(async |conn| {
            open_work::admit(conn, owner, OpenWork::Uploads, cap).await?;
            let multipart = ctx
                .storage
                .create_multipart(contract.object_key, contract.content_type)
                .await?;
            opened = Some(multipart.clone());
            multiparts::insert(conn, contract, &multipart, part_bytes as i64).await?;
            Ok(())
        })
        .await;
    if let (Err(_), Some(multipart)) = (&recorded, opened)
        && let Err(abort) = ctx
            .storage
            .abort_multipart(contract.object_key, &multipart)
            .await
    {
        tracing::warn!(error = %crate::telemetry::error_chain(&abort), "could not abort the multipart upload of an upload that was not recorded");
    }
    recorded
}

/// The tus HEAD: whatever request holds the upload is dead to its client (it is about to
/// resume), so the upload is taken from it; an upload whose bytes have all arrived but whose
/// multipart upload is not complete yet is completed now.
pub(super) async fn resume(ctx: &AppContext, status: &UploadStatus) -> Result<(), AppError> {
    let mut conn = ctx.db.get().await?;
    multiparts::take_over(&mut conn, status.row.id).await?;
    drop(conn);
    if status.state == UploadState::Pending
        && let Err(error) = finish(ctx, status).await
    {
        // HEAD answers the offset anyway; the next PATCH tries again.
        tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not complete an upload whose bytes have all arrived");
    }
    Ok(())
}

/// An upload whose bytes have all arrived: complete its multipart upload if that is still
/// to do, then confirm it (what the answer to its last PATCH waits for).
pub(super) async fn finish(ctx: &AppContext, status: &UploadStatus) -> Result<(), AppError> {
    let row = &status.row;
    let id = row.id;
    let multipart = {
        let mut conn = ctx.db.get().await?;
        multiparts::multipart_of(&mut conn, id).await?
    };
    if let Some(multipart) = multipart {
        let mut expected = 0i64;
        for part in &multipart.parts {
            if part.start_offset != expected {
                return Err(AppError::Storage(StorageError::refused(
                    "CompleteMultipartUpload",
                    &row.object_key,
                    "the ledger's parts do not follow each other",
                )));
            }
            expected += part.size_bytes;
        }
        let numbered: Vec<(i32, String)> = multipart
            .parts
            .iter()
            .map(|p| (p.part_number, p.etag.clone()))
            .collect();
        let completed = ctx
            .storage
            .complete_multipart(&row.object_key, &multipart.multipart_id, &numbered)
            .await?;
        // The object must be the whole file, whether S3 assembled it now or before (an
        // answer lost on the way).
        let size = ctx.storage.head(&row.object_key).await?.map(|h| h.size);
        if size != Some(row.declared_size) {
            return Err(AppError::Storage(StorageError::refused(
                "CompleteMultipartUpload",
                &row.object_key,
                match completed {
                    Completed::Now => "the assembled object is not of the declared size",
                    Completed::UnknownUpload => "S3 no longer knows the multipart upload",
                },
            )));
        }
        let mut conn = ctx.db.get().await?;
        multiparts::forget(&mut conn, id).await?;
    }
    if let Err(error) = ctx.storage.delete_prefix(&tail_prefix(id)).await {
        tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not delete an upload's tail pieces; vidq reconcile reports them");
    }
    let accepted = {
        let mut conn = ctx.db.get().await?;
        super::uploads::accept(&mut conn, row.owner_id, id, &row.object_key).await
    };
    match accepted {
        Ok(Some(_)) => {
            tracing::info!(upload_id = %id, "upload through vidq assembled in S3 and confirmed");
            Ok(())
        }
        // Confirmed by a request that finished it first.
        Ok(None) => Ok(()),
        Err(error) => Err(error),
    }
}

/// tus termination of an `s3`-store upload: its multipart upload is aborted and its tail
/// pieces deleted before the row goes, so nothing is left that no row names. If S3 does not
/// answer, the row stays (`503`) and the client may try again.
pub(super) async fn terminate(ctx: &AppContext, status: &UploadStatus) -> Result<(), AppError> {
    let id = status.row.id;
    let multipart = {
        let mut conn = ctx.db.get().await?;
        multiparts::take_over(&mut conn, id).await?;
        multiparts::multipart_of(&mut conn, id).await?
    };
    if let Some(multipart) = multipart {
        ctx.storage
            .abort_multipart(&status.row.object_key, &multipart.multipart_id)
            .await?;
    }
    ctx.storage.delete_prefix(&tail_prefix(id)).await?;
    let mut conn = ctx.db.get().await?;
    if db::uploads::receiving::delete_receiving(&mut conn, id).await? == 0 {
        return Err(AppError::Receive(ReceiveError::UploadComplete));
    }
    tracing::info!(upload_id = %id, "upload through vidq terminated; its multipart upload aborted");
    Ok(())
}
