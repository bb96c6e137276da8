//! One request's bytes in the `s3` store: take the upload's lease, stream the body into
//! parts and tail pieces ([`Writer`] fed by a [`Feed`]), count what landed, let the upload go,
//! and complete it if this request brought its last byte.

use bytes::Bytes;
use futures_util::Stream;

use super::feed::Feed;
use super::writer::Writer;
use super::{MIN_PART, finish};
use crate::app::ingest::{Admitted, BodyError, Received, UploadStatus};
use crate::app::upload_locks::UploadGuard;
use crate::app::{AppContext, AppError, ReceiveError, UploadError};
use crate::db::uploads::multiparts;
use crate::domain::ids::RequestToken;
use crate::domain::tus::ChecksumHasher;
use crate::domain::upload::UploadState;

/// Streams one request's bytes into the upload's parts (see the `ingest_s3` module's doc).
pub(in crate::app) async fn receive<S>(
    ctx: &AppContext,
    status: &UploadStatus,
    admitted: Admitted,
    body: S,
    guard: &UploadGuard,
) -> Result<Received, AppError>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    let row = &status.row;
    let token = RequestToken::new();
    // Enough part numbers for the parts this body can fill (more are reserved if a body
    // without a length runs past them).
    let numbers = (admitted.length.unwrap_or(MIN_PART) / MIN_PART + 2).min(10_000) as i32;
    let lease = take_lease(ctx, status, admitted.held, token, numbers).await?;
    let mut writer = Writer {
        ctx,
        upload: row.id,
        key: row.object_key.clone(),
        token,
        declared: row.declared_size as u64,
        part_bytes: lease.part_bytes as u64,
        multipart_id: lease.multipart_id.clone(),
        numbers: (lease.first_number, numbers),
        committed: admitted.held,
        at: admitted.held,
        tail: lease.tail.clone(),
        parts_end: lease.parts_end as u64,
        uncounted: multiparts::Stored::default(),
        count_each: !admitted.whole_file && admitted.checksum.is_none(),
    };
    let mut feed = Feed {
        body,
        ahead: Vec::new(),
        ended: false,
        sent: 0,
        limit: writer.declared - admitted.offset,
        declared: writer.declared,
        length: admitted.length,
        hasher: admitted
            .checksum
            .as_ref()
            .map(|c| ChecksumHasher::new(c.algorithm)),
    };
    let outcome = store_and_count(&mut writer, &mut feed, &admitted, guard).await;
    // The upload is let go whatever happened (a lost lease, a failure): the next request
    // need not wait for the lease to end.
    if let Ok(mut conn) = ctx.db.get().await {
        let _ = multiparts::release(&mut conn, row.id, token).await;
    }
    if let Err(error) = outcome {
        writer.drop_uncounted().await;
        return Err(error);
    }
    let complete = writer.committed == writer.declared;
    tracing::info!(
        from = admitted.offset,
        held = writer.committed,
        declared = writer.declared,
        complete,
        "upload bytes received and stored in S3"
    );
    if complete {
        let mut now = status.clone();
        now.state = UploadState::Pending;
        finish(ctx, &now).await?;
    }
    Ok(Received {
        offset: writer.committed,
        complete,
        expires_at: row.expires_at,
    })
}

/// The upload's lease for this request at offset `held`, with `numbers` part numbers; the
/// answer a request gets when another holds it or the upload has moved on.
async fn take_lease(
    ctx: &AppContext,
    status: &UploadStatus,
    held: u64,
    token: RequestToken,
    numbers: i32,
) -> Result<multiparts::Lease, AppError> {
    let row = &status.row;
    let lease = {
        let mut conn = ctx.db.get().await?;
        multiparts::lease(&mut conn, row.id, held as i64, token, numbers).await?
    };
    match lease {
        Ok(lease) => Ok(lease),
        Err(multiparts::NotLeased::Held) => Err(AppError::Receive(ReceiveError::UploadBusy)),
        Err(multiparts::NotLeased::NumbersExhausted) => {
            Err(AppError::Receive(ReceiveError::UploadTooFragmented))
        }
        Err(multiparts::NotLeased::Moved) => {
            let now = crate::app::ingest::status(ctx, row.owner_id, row.id).await?;
            Err(match now.state {
                UploadState::Receiving => AppError::Receive(ReceiveError::OffsetMismatch {
                    expected: now.row.received_bytes as u64,
                }),
                UploadState::Expired | UploadState::Rejected => {
                    AppError::Receive(ReceiveError::UploadGone { state: now.state })
                }
                _ => AppError::Receive(ReceiveError::UploadComplete),
            })
        }
    }
}

/// The body through `writer` into S3, checked against the request's checksum and (for the
/// single PUT) the declared size, then counted in the ledger.
async fn store_and_count<S>(
    writer: &mut Writer<'_>,
    feed: &mut Feed<S>,
    admitted: &Admitted,
    guard: &UploadGuard,
) -> Result<(), AppError>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    writer.run(feed, guard).await?;
    let digest_ok = match (&admitted.checksum, feed.hasher.take()) {
        (Some(want), Some(hasher)) => hasher.finish() == want.digest,
        _ => true,
    };
    if !digest_ok {
        return Err(AppError::Receive(ReceiveError::ChecksumMismatch));
    }
    if admitted.whole_file && writer.at != writer.declared {
        return Err(AppError::Upload(UploadError::SizeMismatch {
            declared: writer.declared as i64,
            actual: feed.sent as i64,
        }));
    }
    writer.count().await
}
