//! What one request writes to S3: whole parts (the tail pieces first, then the body) and,
//! for the rest of a body too short for a part, a tail piece; counted in the ledger as they
//! land, while the request's lease is renewed beside them.

use bytes::Bytes;
use futures_util::Stream;

use super::feed::Feed;
use super::{RENEW_EVERY, tail_prefix};
use crate::adapters::storage::StorageError;
use crate::app::ingest::BodyError;
use crate::app::upload_locks::UploadGuard;
use crate::app::{AppContext, AppError, ReceiveError};
use crate::db::uploads::multiparts;
use crate::domain::ids::{RequestToken, UploadId};

/// What one request writes, and where the upload stands as it goes.
pub(super) struct Writer<'a> {
    pub(super) ctx: &'a AppContext,
    pub(super) upload: UploadId,
    pub(super) key: String,
    pub(super) token: RequestToken,
    pub(super) declared: u64,
    pub(super) part_bytes: u64,
    pub(super) multipart_id: String,
    /// The next reserved part number, and how many are left.
    pub(super) numbers: (i32, i32),
    /// The offset the ledger counts.
    pub(super) committed: u64,
    /// The offset of what is stored (counted or not).
    pub(super) at: u64,
    /// Tail pieces not yet taken into a part.
    pub(super) tail: Vec<multiparts::TailPiece>,
    /// Where the tail starts.
    pub(super) parts_end: u64,
    /// Stored, not counted yet.
    pub(super) uncounted: multiparts::Stored,
    /// Count each part and piece as it lands (no checksum to wait for).
    pub(super) count_each: bool,
}

impl Writer<'_> {
    /// Parts and pieces until the body ends, holding the lease meanwhile.
    pub(super) async fn run<S>(
        &mut self,
        feed: &mut Feed<S>,
        guard: &UploadGuard,
    ) -> Result<(), AppError>
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
                () = guard.stop.cancelled() => return Err(AppError::Receive(ReceiveError::UploadBusy)),
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
                .ok_or(AppError::Receive(ReceiveError::UploadTooFragmented))?;
            self.numbers = (first, 4);
        }
        let number = self.numbers.0;
        self.numbers = (number + 1, self.numbers.1 - 1);
        Ok(number)
    }

    /// Counts what is stored: the CAS from the counted offset to the stored one.
    pub(super) async fn count(&mut self) -> Result<(), AppError> {
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
            return Err(AppError::Receive(ReceiveError::UploadBusy));
        }
        self.committed = self.at;
        self.uncounted = multiparts::Stored::default();
        Ok(())
    }

    /// Deletes the tail piece this request stored but will not count (parts not counted are
    /// left out of the completion, and S3 drops them then).
    pub(super) async fn drop_uncounted(&self) {
        if let Some(piece) = &self.uncounted.piece
            && let Err(error) = self.ctx.storage.delete(&piece.object_key).await
        {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not delete a tail piece that was not counted");
        }
    }
}

/// Renews the lease every few seconds; returns (the error to answer) once it is lost.
async fn renew_until_lost(ctx: &AppContext, upload: UploadId, token: RequestToken) -> AppError {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let renewed = async {
            let mut conn = ctx.db.get().await?;
            Ok::<_, AppError>(multiparts::renew(&mut conn, upload, token).await?)
        }
        .await;
        match renewed {
            Ok(true) => {}
            Ok(false) => return AppError::Receive(ReceiveError::UploadBusy),
            Err(error) => return error,
        }
    }
}
