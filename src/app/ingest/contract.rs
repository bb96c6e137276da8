//! An upload through vidq apart from its bytes: creating its contract, reading it (the status
//! endpoint, tus `HEAD`) and terminating it (tus `DELETE`).

use chrono::Utc;

use super::{ReceivingUpload, UploadStatus, ingest, is_s3, spool_error, take};
use crate::adapters::spool::AppendError;
use crate::app::open_work::{self, OpenWork};
use crate::app::{AppContext, AppError, ReceiveError};
use crate::db;
use crate::domain::ids::{UploadId, UserId};
use crate::domain::keys;
use crate::domain::tus::Checksum;
use crate::domain::upload::{NewUpload, UploadState, UploadStore};
use diesel_async::AsyncConnection as _;

/// Checks the request like a presigned one and the caller's open uploads against their cap,
/// then records the `receiving` contract under this node. Its spool file is made when its
/// first byte arrives ([`SpoolRoot::hold_or_start`](crate::adapters::spool::SpoolRoot::hold_or_start)): until then a row that counts 0 bytes
/// needs no file.
#[tracing::instrument(skip_all, fields(owner = %owner))]
pub async fn create(
    ctx: &AppContext,
    owner: UserId,
    filename: &str,
    content_type: &str,
    size_bytes: i64,
    checksum: Option<Checksum>,
    tus_metadata: Option<&str>,
) -> Result<ReceivingUpload, AppError> {
    let ingest = ingest(ctx)?;
    let request = NewUpload::parse(
        filename,
        content_type,
        size_bytes,
        ctx.upload.max_upload_bytes,
    )?;
    let id = UploadId::new();
    let key = keys::original(id);
    let size = i64::try_from(request.size_bytes).expect("size was checked against the limit");
    let expires_at =
        Utc::now() + chrono::Duration::from_std(ingest.ttl).expect("the TTL is at most 30 days");
    let checksum = checksum.map(|c| c.to_ledger());
    let contract = db::uploads::NewUploadRow {
        id,
        owner_id: owner,
        object_key: &key,
        filename: &request.filename,
        content_type: &request.content_type,
        declared_size: size,
        expires_at,
        checksum: checksum.as_deref(),
        tus_metadata,
    };
    let cap = ctx.upload.max_open_uploads_per_user;
    let _turn = open_work::turn(owner, OpenWork::Uploads).await;
    match ingest.store {
        UploadStore::S3 => {
            crate::app::ingest_s3::create(ctx, &contract, ingest.part_bytes, cap).await?
        }
        UploadStore::Spool => {
            let spool_path = format!("{}/{id}", crate::adapters::spool::UPLOADS_DIR);
            let mut conn = ctx.db.get().await?;
            conn.transaction::<_, AppError, _>(async |conn| {
                open_work::admit(conn, owner, OpenWork::Uploads, cap).await?;
                let row = db::uploads::sweep::NewVidqUpload {
                    contract,
                    spool_path: &spool_path,
                    node_id: &ingest.node_id,
                };
                Ok(db::uploads::receiving::insert_receiving(conn, &row).await?)
            })
            .await?;
        }
    }
    tracing::info!(upload_id = %id, size, node = %ingest.node_id, store = ingest.store.as_str(), "upload through vidq created");
    Ok(ReceivingUpload {
        id,
        size: request.size_bytes,
        expires_at,
    })
}

/// The contract and what became of it; `None` for an unknown id or a stranger's.
pub async fn status(
    ctx: &AppContext,
    owner: UserId,
    id: UploadId,
) -> Result<UploadStatus, AppError> {
    let mut conn = ctx.db.get().await?;
    let row = db::uploads::find_owned(&mut conn, owner, id)
        .await?
        .ok_or(AppError::NotFound)?;
    let video_id = db::uploads::video_of(&mut conn, id).await?;
    let (state, via) = (row.state, row.via);
    Ok(UploadStatus {
        row,
        state,
        via,
        video_id,
    })
}

/// Takes the upload over from any request that holds it (which keeps what it received),
/// then reads it: the tus `HEAD`, so the offset it answers is the one on disk.
pub async fn resume_point(
    ctx: &AppContext,
    owner: UserId,
    id: UploadId,
) -> Result<UploadStatus, AppError> {
    let (status, _guard) = take(ctx, owner, id).await?;
    if is_s3(&status) {
        crate::app::ingest_s3::resume(ctx, &status).await?;
        return self::status(ctx, owner, id).await;
    }
    Ok(status)
}

/// tus termination: drops a `receiving` upload and its spool file.
#[tracing::instrument(skip_all, fields(owner = %owner, upload_id = %id))]
pub async fn terminate(ctx: &AppContext, owner: UserId, id: UploadId) -> Result<(), AppError> {
    let ingest = ingest(ctx)?;
    let (status, _guard) = take(ctx, owner, id).await?;
    if status.state != UploadState::Receiving {
        return Err(AppError::Receive(ReceiveError::UploadComplete));
    }
    if is_s3(&status) {
        return crate::app::ingest_s3::terminate(ctx, &status).await;
    }
    // Not while a request of another process sharing the spool writes it.
    let _held = match status.row.spool_path.as_deref() {
        Some(path) => match ingest.spool.hold(path).await {
            Ok(held) => Some(held),
            Err(AppendError::Lost { .. }) => None,
            Err(error) => return Err(spool_error(error)),
        },
        None => None,
    };
    let deleted = {
        let mut conn = ctx.db.get().await?;
        db::uploads::receiving::delete_receiving(&mut conn, id).await?
    };
    if deleted == 0 {
        return Err(AppError::Receive(ReceiveError::UploadComplete));
    }
    if let Some(path) = status.row.spool_path.as_deref()
        && let Err(error) = ingest.spool.remove(path).await
    {
        tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not remove a terminated upload's spool file");
    }
    tracing::info!("upload through vidq terminated");
    Ok(())
}
