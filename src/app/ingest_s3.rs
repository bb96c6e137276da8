//! The `s3` tus store (`VIDQ_TUS_STORE=s3`): an upload through vidq is an S3 multipart
//! upload on its final key (`originals/{id}`), and its offset, parts and tail live in the
//! ledger (`db::multiparts`), so any API node takes any of its requests and the upload
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

use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use uuid::Uuid;

use super::ingest::{Admitted, BodyError, Received, UploadStatus};
use super::upload_locks::UploadGuard;
use super::{AppContext, AppError};
use crate::adapters::storage::{BodySender, Completed, StorageError};
use crate::db::{self, multiparts};
use crate::domain::ids::{UploadId, UserId};
use crate::domain::tus::ChecksumHasher;
use crate::domain::upload::UploadState;

/// How often a request renews its lease while it holds the upload.
const RENEW_EVERY: Duration = Duration::from_secs(5);
/// S3's smallest part: the part numbers a request reserves are counted by it (an upload's
/// own part size is at least this).
const MIN_PART: u64 = 5 * 1024 * 1024;
/// Where tail pieces live.
pub const TAIL_PREFIX: &str = "tus-tail/";

/// The prefix of an upload's tail pieces.
pub fn tail_prefix(upload: Uuid) -> String {
    format!("{TAIL_PREFIX}{upload}/")
}

/// Starts the multipart upload, then records the `receiving` contract with it (S3 first:
/// a row never names a multipart upload that does not exist).
pub(super) async fn create(
    ctx: &AppContext,
    contract: &db::uploads::NewUploadRow<'_>,
    part_bytes: u64,
) -> Result<(), AppError> {
    let multipart = ctx
        .storage
        .create_multipart(contract.object_key, contract.content_type)
        .await?;
    let inserted = async {
        let mut conn = ctx.db.get().await?;
        multiparts::insert(&mut conn, contract, &multipart, part_bytes as i64).await?;
        Ok::<_, AppError>(())
    }
    .await;
    if let Err(error) = inserted {
        if let Err(abort) = ctx
            .storage
            .abort_multipart(contract.object_key, &multipart)
            .await
        {
            tracing::warn!(error = %crate::telemetry::error_chain(&abort), "could not abort the multipart upload of an upload that was not recorded");
        }
        return Err(error);
    }
    Ok(())
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
        super::uploads::accept(
            &mut conn,
            UserId(row.owner_id),
            UploadId(id),
            &row.object_key,
        )
        .await
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
    if db::ingest::delete_receiving(&mut conn, id).await? == 0 {
        return Err(AppError::UploadComplete);
    }
    tracing::info!(upload_id = %id, "upload through vidq terminated; its multipart upload aborted");
    Ok(())
}

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
pub async fn abort_all_of(ctx: &AppContext, owner: Uuid) -> Result<usize, AppError> {
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

/// Streams one request's bytes into the upload's parts (see the module doc).
pub(super) async fn receive<S>(
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
    let token = Uuid::now_v7();
    // Enough part numbers for the parts this body can fill (more are reserved if a body
    // without a length runs past them).
    let numbers = (admitted.length.unwrap_or(MIN_PART) / MIN_PART + 2).min(10_000) as i32;
    let lease = {
        let mut conn = ctx.db.get().await?;
        multiparts::lease(&mut conn, row.id, admitted.held as i64, token, numbers).await?
    };
    let lease = match lease {
        Ok(lease) => lease,
        Err(multiparts::NotLeased::Held) => return Err(AppError::UploadBusy),
        Err(multiparts::NotLeased::NumbersExhausted) => return Err(AppError::UploadTooFragmented),
        Err(multiparts::NotLeased::Moved) => {
            let now = super::ingest::status(ctx, UserId(row.owner_id), UploadId(row.id)).await?;
            return Err(match now.state {
                UploadState::Receiving => AppError::OffsetMismatch {
                    expected: now.row.received_bytes as u64,
                },
                UploadState::Expired | UploadState::Rejected => {
                    AppError::UploadGone { state: now.state }
                }
                _ => AppError::UploadComplete,
            });
        }
    };
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
    let outcome = async {
        writer.run(&mut feed, guard).await?;
        let digest_ok = match (&admitted.checksum, feed.hasher.take()) {
            (Some(want), Some(hasher)) => hasher.finish() == want.digest,
            _ => true,
        };
        if !digest_ok {
            return Err(AppError::ChecksumMismatch);
        }
        if admitted.whole_file && writer.at != writer.declared {
            return Err(AppError::SizeMismatch {
                declared: row.declared_size,
                actual: feed.sent as i64,
            });
        }
        writer.count().await
    }
    .await;
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

/// A request's body as it is read: chunks, cut to size on demand, hashed and counted as they
/// go, never past the upload's length.
struct Feed<S> {
    body: S,
    /// Read, not yet handed out (a body without a length is read a part ahead).
    ahead: Vec<Bytes>,
    ended: bool,
    /// Bytes handed out.
    sent: u64,
    /// Bytes this request may send (the upload's length minus its offset).
    limit: u64,
    /// The upload's length.
    declared: u64,
    /// The body's length, when the client said it.
    length: Option<u64>,
    hasher: Option<ChecksumHasher>,
}

impl<S> Feed<S>
where
    S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
{
    /// The next chunk, at most `max` bytes; `None` at the end of the body.
    async fn next(&mut self, max: u64) -> Result<Option<Bytes>, AppError> {
        let mut chunk = match self.ahead.pop() {
            Some(chunk) => chunk,
            None if self.ended => return Ok(None),
            None => match self.body.next().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(error)) => return Err(AppError::BodyInterrupted(error)),
                None => {
                    self.ended = true;
                    return Ok(None);
                }
            },
        };
        if chunk.len() as u64 > max {
            self.ahead.push(chunk.split_off(max as usize));
        }
        if self.sent + chunk.len() as u64 > self.limit {
            return Err(AppError::PastUploadLength {
                length: self.declared,
            });
        }
        self.sent += chunk.len() as u64;
        if let Some(hasher) = &mut self.hasher {
            hasher.update(&chunk);
        }
        Ok(Some(chunk))
    }

    /// How many of the next `want` bytes the request has: known from its length, or read
    /// ahead into memory (at most `want`, a part) when it gave none.
    async fn available(&mut self, want: u64) -> Result<u64, AppError> {
        if let Some(length) = self.length {
            return Ok((length - self.sent).min(want));
        }
        let mut have: u64 = self.ahead.iter().map(|c| c.len() as u64).sum();
        while have < want && !self.ended {
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    have += chunk.len() as u64;
                    self.ahead.insert(0, chunk);
                }
                Some(Err(error)) => return Err(AppError::BodyInterrupted(error)),
                None => self.ended = true,
            }
        }
        Ok(have.min(want))
    }

    /// Sends exactly `n` bytes into `tx`; an error if the body ends first.
    async fn send(&mut self, mut n: u64, tx: &BodySender) -> Result<(), AppError> {
        while n > 0 {
            let chunk = self
                .next(n)
                .await?
                .ok_or(AppError::BodyInterrupted(BodyError::Broken))?;
            n -= chunk.len() as u64;
            if tx.send(chunk).await.is_err() {
                // The S3 call ended early: its own error says why.
                return Ok(());
            }
        }
        Ok(())
    }
}

/// What one request writes, and where the upload stands as it goes.
struct Writer<'a> {
    ctx: &'a AppContext,
    upload: Uuid,
    key: String,
    token: Uuid,
    declared: u64,
    part_bytes: u64,
    multipart_id: String,
    /// The next reserved part number, and how many are left.
    numbers: (i32, i32),
    /// The offset the ledger counts.
    committed: u64,
    /// The offset of what is stored (counted or not).
    at: u64,
    /// Tail pieces not yet taken into a part.
    tail: Vec<multiparts::TailPiece>,
    /// Where the tail starts.
    parts_end: u64,
    /// Stored, not counted yet.
    uncounted: multiparts::Stored,
    /// Count each part and piece as it lands (no checksum to wait for).
    count_each: bool,
}

impl Writer<'_> {
    /// Parts and pieces until the body ends, holding the lease meanwhile.
    async fn run<S>(&mut self, feed: &mut Feed<S>, guard: &UploadGuard) -> Result<(), AppError>
    where
        S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
    {
        let (ctx, upload, token) = (self.ctx, self.upload, self.token);
        loop {
            let tail_bytes = self.at - self.parts_end;
            let part_size = self.part_bytes.min(self.declared - self.parts_end);
            let wanted = part_size - tail_bytes;
            let have = feed.available(wanted).await?;
            if have == 0 {
                return Ok(());
            }
            let step = async {
                if have == wanted {
                    self.land_part(feed, part_size, tail_bytes).await
                } else {
                    self.land_piece(feed, have).await
                }
            };
            tokio::select! {
                landed = step => landed?,
                lost = renew_until_lost(ctx, upload, token) => return Err(lost),
                () = guard.stop.cancelled() => return Err(AppError::UploadBusy),
            }
            if self.count_each {
                self.count().await?;
            }
        }
    }

    /// One whole part: the tail pieces first (read back from S3), then `part_size -
    /// tail_bytes` bytes of the body.
    async fn land_part<S>(
        &mut self,
        feed: &mut Feed<S>,
        part_size: u64,
        tail_bytes: u64,
    ) -> Result<(), AppError>
    where
        S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
    {
        let number = self.number().await?;
        let (tx, call) =
            self.ctx
                .storage
                .upload_part_streamed(&self.key, &self.multipart_id, number, part_size);
        let storage = &self.ctx.storage;
        let tail = &self.tail;
        let fed = async move {
            for piece in tail {
                let copied = storage.copy_into(&piece.object_key, &tx).await?;
                if copied != piece.size_bytes as u64 {
                    return Err(AppError::Storage(StorageError::refused(
                        "GetObject",
                        &piece.object_key,
                        "a tail piece is not of its recorded size",
                    )));
                }
            }
            feed.send(part_size - tail_bytes, &tx).await
        };
        let (fed, etag) = futures_util::join!(fed, call);
        fed?;
        let etag = etag?;
        self.uncounted.parts.push(multiparts::Part {
            start_offset: self.parts_end as i64,
            part_number: number,
            size_bytes: part_size as i64,
            etag,
        });
        self.uncounted.took_tail |= !self.tail.is_empty();
        self.tail.clear();
        self.parts_end += part_size;
        self.at = self.parts_end;
        Ok(())
    }

    /// The rest of the body, shorter than what the next part needs: a tail piece.
    async fn land_piece<S>(&mut self, feed: &mut Feed<S>, size: u64) -> Result<(), AppError>
    where
        S: Stream<Item = Result<Bytes, BodyError>> + Unpin,
    {
        let key = format!("{}{:016}-{}", tail_prefix(self.upload), self.at, self.token);
        let (tx, call) = self.ctx.storage.put_streamed(&key, size);
        let fed = async move { feed.send(size, &tx).await };
        let (fed, put) = futures_util::join!(fed, call);
        fed?;
        put?;
        let piece = multiparts::TailPiece {
            start_offset: self.at as i64,
            size_bytes: size as i64,
            object_key: key,
        };
        self.tail.push(piece.clone());
        self.uncounted.piece = Some(piece);
        self.at += size;
        Ok(())
    }

    /// The next reserved part number (reserving more when used up).
    async fn number(&mut self) -> Result<i32, AppError> {
        if self.numbers.1 == 0 {
            let mut conn = self.ctx.db.get().await?;
            let first = multiparts::reserve(&mut conn, self.upload, self.token, 4)
                .await?
                .ok_or(AppError::UploadTooFragmented)?;
            self.numbers = (first, 4);
        }
        let number = self.numbers.0;
        self.numbers = (number + 1, self.numbers.1 - 1);
        Ok(number)
    }

    /// Counts what is stored: the CAS from the counted offset to the stored one.
    async fn count(&mut self) -> Result<(), AppError> {
        if self.at == self.committed {
            return Ok(());
        }
        let complete = self.at == self.declared;
        let mut conn = self.ctx.db.get().await?;
        let counted = multiparts::count(
            &mut conn,
            self.upload,
            self.token,
            (self.committed as i64, self.at as i64),
            complete,
            &self.uncounted,
        )
        .await?;
        if !counted {
            // Taken over (a HEAD, a lease that ended) or closed meanwhile.
            return Err(AppError::UploadBusy);
        }
        self.committed = self.at;
        self.uncounted = multiparts::Stored::default();
        Ok(())
    }

    /// Deletes the tail piece this request stored but will not count (parts not counted are
    /// left out of the completion, and S3 drops them then).
    async fn drop_uncounted(&self) {
        if let Some(piece) = &self.uncounted.piece
            && let Err(error) = self.ctx.storage.delete(&piece.object_key).await
        {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not delete a tail piece that was not counted");
        }
    }
}

/// Renews the lease every few seconds; returns (the error to answer) once it is lost.
async fn renew_until_lost(ctx: &AppContext, upload: Uuid, token: Uuid) -> AppError {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let renewed = async {
            let mut conn = ctx.db.get().await?;
            Ok::<_, AppError>(multiparts::renew(&mut conn, upload, token).await?)
        }
        .await;
        match renewed {
            Ok(true) => {}
            Ok(false) => return AppError::UploadBusy,
            Err(error) => return error,
        }
    }
}
