//! A request's body as the parts and pieces take it: cut to the size each needs, hashed and
//! counted as it goes, and never past the upload's length.

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::adapters::storage::BodySender;
use crate::app::ingest::BodyError;
use crate::app::{AppError, ReceiveError};
use crate::domain::tus::ChecksumHasher;

/// A request's body as it is read: chunks, cut to size on demand, hashed and counted as they
/// go, never past the upload's length.
pub(super) struct Feed<S> {
    pub(super) body: S,
    /// Read, not yet handed out (a body without a length is read a part ahead).
    pub(super) ahead: Vec<Bytes>,
    pub(super) ended: bool,
    /// Bytes handed out.
    pub(super) sent: u64,
    /// Bytes this request may send (the upload's length minus its offset).
    pub(super) limit: u64,
    /// The upload's length.
    pub(super) declared: u64,
    /// The body's length, when the client said it.
    pub(super) length: Option<u64>,
    pub(super) hasher: Option<ChecksumHasher>,
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
                Some(Err(error)) => {
                    return Err(AppError::Receive(ReceiveError::BodyInterrupted(error)));
                }
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
            return Err(AppError::Receive(ReceiveError::PastUploadLength {
                length: self.declared,
            }));
        }
        self.sent += chunk.len() as u64;
        if let Some(hasher) = &mut self.hasher {
            hasher.update(&chunk);
        }
        Ok(Some(chunk))
    }

    /// How many of the next `want` bytes the request has: known from its length, or read
    /// ahead into memory (at most `want`, a part) when it gave none.
    pub(super) async fn available(&mut self, want: u64) -> Result<u64, AppError> {
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
                Some(Err(error)) => {
                    return Err(AppError::Receive(ReceiveError::BodyInterrupted(error)));
                }
                None => self.ended = true,
            }
        }
        Ok(have.min(want))
    }

    /// Sends exactly `n` bytes into `tx`; an error if the body ends first.
    pub(super) async fn send(&mut self, mut n: u64, tx: &BodySender) -> Result<(), AppError> {
        while n > 0 {
            let chunk =
                self.next(n)
                    .await?
                    .ok_or(AppError::Receive(ReceiveError::BodyInterrupted(
                        BodyError::Broken,
                    )))?;
            n -= chunk.len() as u64;
            if tx.send(chunk).await.is_err() {
                // The S3 call ended early: its own error says why.
                return Ok(());
            }
        }
        Ok(())
    }
}
