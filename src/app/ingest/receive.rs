//! One request's bytes: checked ([`super::admit`]), then handed to the `s3` store or
//! streamed into the spool file, fsynced, and counted by the ledger. The spool path is cut
//! into the steps it takes, each named below, so the order that keeps the ledger honest
//! (hold the file, write, finish, count, only then answer) reads top to bottom in
//! [`into_spool`].

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::admit::{Admission, Admitted, admit};
use super::{
    BodyError, Ingest, Receive, Received, UploadStatus, closed, ingest, is_s3, lose, spool_error,
    take,
};
use crate::adapters::spool::{AppendEnd, SpoolAppend};
use crate::app::upload_locks::UploadGuard;
use crate::app::{AppContext, AppError, ReceiveError, UploadError};
use crate::db;
use crate::domain::ids::{UploadId, UserId};
use crate::domain::tus::Checksum;
use crate::domain::upload::UploadState;

/// Streams one request's bytes into the spool file (see the `ingest` module's doc). tus
/// (`offset` given): appends at the ledger's offset, keeps what arrived of a body cut short
/// (unless a checksum was promised), refuses a checksum mismatch with nothing kept. The
/// single PUT: the whole file from byte 0 or nothing.
#[tracing::instrument(skip_all, fields(owner = %owner, upload_id = %id))]
pub async fn receive<S>(
    ctx: &AppContext,
    owner: UserId,
    id: UploadId,
    receive: Receive,
    body: S,
) -> Result<Received, AppError>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    let ingest = ingest(ctx)?;
    let (status, guard) = take(ctx, owner, id).await?;
    let admitted = match admit(&status, &receive)? {
        Admission::Complete(received) => {
            // Every byte has arrived; the `s3` store may still owe the completion.
            if is_s3(&status) && status.state == UploadState::Pending {
                crate::app::ingest_s3::finish(ctx, &status).await?;
            }
            return Ok(received);
        }
        Admission::Go(admitted) => admitted,
    };
    if is_s3(&status) {
        return crate::app::ingest_s3::receive(ctx, &status, admitted, body, &guard).await;
    }
    into_spool(ctx, ingest, id, &status, admitted, body, &guard).await
}

/// The spool store's part of [`receive`]: its steps in order.
async fn into_spool<S>(
    ctx: &AppContext,
    ingest: &Ingest,
    id: UploadId,
    status: &UploadStatus,
    admitted: Admitted,
    mut body: S,
    guard: &UploadGuard,
) -> Result<Received, AppError>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    let row = &status.row;
    let declared = row.declared_size as u64;
    let Admitted {
        held,
        offset,
        whole_file,
        checksum,
        ..
    } = admitted;
    let mut append = open_append(ctx, ingest, id, status, offset, checksum).await?;
    let (end, failure) =
        copy_body(&mut append, &mut body, guard, offset, declared, whole_file).await;
    // Held until the ledger counts what this request kept: no other request, of this
    // process or another sharing the spool, can cut or extend the file in between.
    let (appended, _held) =
        unless_lost(ctx, id, append.finish(end).await.map_err(spool_error)).await?;
    let now_held = offset + appended.kept;
    let complete = now_held == declared;
    count_kept(ctx, id, held, now_held, complete).await?;
    tracing::info!(
        from = offset,
        kept = appended.kept,
        held = now_held,
        declared,
        complete,
        "upload bytes received and fsynced"
    );
    if appended.checksum_mismatch {
        return Err(AppError::Receive(ReceiveError::ChecksumMismatch));
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    Ok(Received {
        offset: now_held,
        complete,
        expires_at: row.expires_at,
    })
}

/// Holds the upload's spool file (made now if no byte has arrived yet) and opens an append
/// at the request's offset, checked against the digest the request must have.
async fn open_append(
    ctx: &AppContext,
    ingest: &Ingest,
    id: UploadId,
    status: &UploadStatus,
    offset: u64,
    checksum: Option<Checksum>,
) -> Result<SpoolAppend, AppError> {
    let row = &status.row;
    let spool_path = row.spool_path.as_deref().unwrap_or_default();
    let file = ingest
        .spool
        .hold_or_start(spool_path, row.received_bytes == 0)
        .await
        .map_err(spool_error);
    let file = unless_lost(ctx, id, file).await?;
    ingest
        .spool
        .append(
            file,
            offset,
            checksum,
            crate::adapters::writer_share::Writer {
                user: row.owner_id,
                recording: None,
            },
        )
        .map_err(spool_error)
}

/// Copies the body into the append until it ends, breaks, runs past the upload's length, or
/// another request takes the upload over. Returns how the append is to end, and the error to
/// answer once what was kept is counted (a body cut short still keeps its bytes on tus).
async fn copy_body<S>(
    append: &mut SpoolAppend,
    body: &mut S,
    guard: &UploadGuard,
    offset: u64,
    declared: u64,
    whole_file: bool,
) -> (AppendEnd, Option<AppError>)
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    let mut sent = 0u64;
    let mut failure = None;
    let end = loop {
        let next = tokio::select! {
            next = body.next() => next,
            () = guard.stop.cancelled() => {
                failure = Some(AppError::Receive(ReceiveError::UploadBusy));
                break AppendEnd::Interrupted;
            }
        };
        match next {
            Some(Ok(chunk)) => {
                sent += chunk.len() as u64;
                if offset + sent > declared {
                    failure = Some(AppError::Receive(ReceiveError::PastUploadLength {
                        length: declared,
                    }));
                    break AppendEnd::Discard;
                }
                if append.write(chunk).await.is_err() {
                    break AppendEnd::Interrupted;
                }
            }
            Some(Err(error)) => {
                failure = Some(AppError::Receive(ReceiveError::BodyInterrupted(error)));
                break AppendEnd::Interrupted;
            }
            None if whole_file && sent != declared => {
                failure = Some(AppError::Upload(UploadError::SizeMismatch {
                    declared: declared as i64,
                    actual: sent as i64,
                }));
                break AppendEnd::Discard;
            }
            None => break AppendEnd::Complete,
        }
    };
    // The single PUT is all or nothing: a body cut short leaves nothing behind.
    let end = if whole_file && end == AppendEnd::Interrupted {
        AppendEnd::Discard
    } else {
        end
    };
    (end, failure)
}

/// Moves the ledger's count from `held` to `now_held` (and the row to `pending` when
/// `complete`), a CAS on the previous count. An upload that expired or was terminated while
/// the bytes arrived is answered with why it is closed.
async fn count_kept(
    ctx: &AppContext,
    id: UploadId,
    held: u64,
    now_held: u64,
    complete: bool,
) -> Result<(), AppError> {
    if now_held == held {
        return Ok(());
    }
    let mut conn = ctx.db.get().await?;
    let moved =
        db::uploads::receiving::advance(&mut conn, id, held as i64, now_held as i64, complete)
            .await?;
    if moved == 0 {
        // Expired or terminated while the bytes arrived.
        drop(conn);
        return Err(closed(ctx, id).await);
    }
    Ok(())
}

/// A spool step's result, except that a spool file found lost (gone, or shorter than the
/// ledger's count) rejects the upload and answers why it is closed: its bytes cannot be
/// resumed, and the client must see that rather than a bare I/O error.
async fn unless_lost<T>(
    ctx: &AppContext,
    id: UploadId,
    result: Result<T, AppError>,
) -> Result<T, AppError> {
    match result {
        Err(AppError::Receive(ReceiveError::SpoolLost)) => {
            lose(ctx, id).await?;
            Err(closed(ctx, id).await)
        }
        other => other,
    }
}
