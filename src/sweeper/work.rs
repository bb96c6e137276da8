//! The upload workers: a row off the queue, its spool file checked, the circuit breaker
//! asked, the contracted key HEADed or PUT ([`Shared::land`]), then confirmed in the
//! confirm's own transaction; a failed try backs the row off, a bad file rejects it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Shared, SweepStore};
use crate::adapters::spool::SpoolCheck;
use crate::adapters::storage::StorageError;
use crate::app::{AppError, UploadError};
use crate::db::{self, recordings::ClaimedFile, uploads::sweep::ClaimedUpload};
use crate::domain::ids::UploadId;
use crate::domain::sweep::{BreakerVerdict, Transition};
use crate::domain::upload::RejectReason;
use crate::sync::Locked;

/// The row a worker holds, in whichever ledger it is.
#[derive(Clone, Copy, Debug)]
pub(super) enum Held {
    /// `uploads.id`.
    Upload(UploadId),
    /// `recording_files.id`.
    File(i64),
}

/// What the queue carries to the upload workers: a row of either ledger.
#[derive(Debug)]
pub(super) enum Work {
    /// An upload through vidq (confirmed into a video once in S3).
    Upload(ClaimedUpload),
    /// A live recording's init or segment.
    File(ClaimedFile),
}

/// S3 holds a row's object: whether this try PUT it (or found it by HEAD), and the size S3
/// holds.
pub(super) struct Landed {
    pub(super) put: bool,
    pub(super) size: i64,
    /// The digest S3 holds the object with (`None`: stored without one).
    pub(super) sha256: Option<String>,
}

/// What one row puts where: the object key, the spool file, the ledger's size and digest,
/// and the `Content-Type` to store.
pub(super) struct Landing<'a> {
    pub(super) key: &'a str,
    pub(super) path: &'a Path,
    pub(super) size: i64,
    /// When the ledger holds a digest, S3 must hold the object with that digest (not just
    /// that size) for the PUT to be skipped, and what S3 holds after the PUT is read back.
    pub(super) sha256: Option<&'a str>,
    pub(super) content_type: &'a str,
}

/// How one row ended, for the counters and the log.
#[derive(Debug)]
pub(super) enum Outcome {
    /// S3 holds the file and the row says so: an upload confirmed, a recording file
    /// marked uploaded.
    Stored,
    /// Somebody else moved the row first: the upload was closed (confirmed, expired,
    /// deleted), or the recording file was sent again with another size.
    Overtaken,
    /// Refused for good (its file is missing, outside the spool, or not what it claims).
    Rejected,
    /// A try failed; the row backs off.
    Failed,
    /// Released without a PUT: the breaker is open.
    HeldByBreaker,
    /// Released at shutdown as it was.
    Stopped,
}

impl<S: SweepStore> Shared<S> {
    /// An upload worker: rows off the queue until it closes; after `shutdown`, rows still
    /// queued are released instead of PUT.
    pub(super) async fn work(
        &self,
        rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Work>>>,
        shutdown: CancellationToken,
    ) {
        loop {
            let work = {
                let mut rx = rx.lock().await;
                tokio::select! {
                    work = rx.recv() => work,
                    () = shutdown.cancelled() => rx.try_recv().ok(),
                }
            };
            let Some(work) = work else { return };
            match work {
                Work::Upload(row) if shutdown.is_cancelled() => {
                    self.release(Held::Upload(row.id)).await
                }
                Work::Upload(row) => {
                    let outcome = self.upload(&row, &shutdown).await;
                    tracing::debug!(upload_id = %row.id, ?outcome, "sweeper row done");
                }
                Work::File(file) if shutdown.is_cancelled() => {
                    self.release(Held::File(file.id)).await
                }
                Work::File(file) => {
                    let outcome = self.upload_file(&file, &shutdown).await;
                    tracing::debug!(file_id = file.id, ?outcome, "sweeper recording file done");
                }
            }
            self.stats.done.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub(super) fn breaker_is_shut(&self) -> bool {
        let breaker = self.breaker.locked();
        // Open and still cooling down: a probe would be refused too.
        let mut probe = breaker.clone();
        matches!(probe.admit(Instant::now()), BreakerVerdict::Refused)
    }

    pub(super) fn note(&self, transition: Option<Transition>) {
        if let Some(t) = transition {
            self.stats
                .breaker_transitions
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                from = t.from.as_str(),
                to = t.to.as_str(),
                "sweeper circuit breaker changed state"
            );
        }
    }

    /// One row, from the file boundary to the confirm.
    #[tracing::instrument(skip_all, fields(upload_id = %row.id))]
    pub(super) async fn upload(&self, row: &ClaimedUpload, cancel: &CancellationToken) -> Outcome {
        let file = match self.root.check(row.spool_path.as_deref()) {
            SpoolCheck::File { path, size } => {
                if i64::try_from(size).ok() != Some(row.declared_size) {
                    return self
                        .reject(
                            Held::Upload(row.id),
                            row.spool_path.as_deref(),
                            RejectReason::SpoolSizeMismatch,
                        )
                        .await;
                }
                path
            }
            SpoolCheck::Refused(reason) => {
                return self
                    .reject(Held::Upload(row.id), row.spool_path.as_deref(), reason)
                    .await;
            }
            SpoolCheck::Unreadable(error) => {
                return self
                    .fail(
                        Held::Upload(row.id),
                        row.tries,
                        &format!("spool file unreadable: {error}"),
                    )
                    .await;
            }
        };
        let landed = self
            .land(
                Held::Upload(row.id),
                row.tries,
                Landing {
                    key: &row.object_key,
                    path: &file,
                    size: row.declared_size,
                    sha256: None,
                    content_type: &row.content_type,
                },
                cancel,
            )
            .await;
        match landed {
            Ok(landed) => self.confirm(row, &file, landed.put).await,
            Err(outcome) => outcome,
        }
    }

    /// From the breaker's admission to S3 holding `key` with `size` bytes, for a row of
    /// either ledger. The PUT may have landed before a crash (or its answer was lost): the
    /// same key with the right size needs no second PUT, and there is never a second key.
    /// `Err` is how the row ended otherwise (held by the breaker, stopped, failed), the row
    /// already given back or backed off.
    pub(super) async fn land(
        &self,
        row: Held,
        tries: i32,
        landing: Landing<'_>,
        cancel: &CancellationToken,
    ) -> Result<Landed, Outcome> {
        let Landing {
            key, size, sha256, ..
        } = landing;
        let admission = self.breaker.locked().admit(Instant::now());
        match admission {
            BreakerVerdict::Allowed => {}
            BreakerVerdict::Probe(t) => self.note(Some(t)),
            BreakerVerdict::Refused => {
                self.stats.held_by_breaker.fetch_add(1, Ordering::Relaxed);
                self.release(row).await;
                return Err(Outcome::HeldByBreaker);
            }
        }
        let landed = match self.store.head(key).await {
            // Already there: the same size, and the same digest when the ledger has one
            // (bytes of the same length can differ: a file sent again with other content).
            Ok(Some(head))
                if head.size == size && (sha256.is_none() || head.sha256.as_deref() == sha256) =>
            {
                self.stats.found_by_head.fetch_add(1, Ordering::Relaxed);
                Landed {
                    put: false,
                    size: head.size,
                    sha256: head.sha256,
                }
            }
            Ok(_) => match self.put(&landing, cancel).await {
                Ok(landed) => landed,
                // Stopped by a shutdown, not failed by S3: the row is given back as it was
                // (no try counted, the breaker untouched).
                Err(_) if cancel.is_cancelled() => {
                    self.release(row).await;
                    return Err(Outcome::Stopped);
                }
                Err(error) => return Err(self.storage_failed(row, tries, &error).await),
            },
            Err(error) => return Err(self.storage_failed(row, tries, &error).await),
        };
        let transition = self.breaker.locked().on_success();
        self.note(transition);
        Ok(landed)
    }

    /// PUTs the file and says what S3 then holds under its key: with a digest to match, read
    /// back, since another PUT of the key may have finished after this one.
    async fn put(
        &self,
        landing: &Landing<'_>,
        cancel: &CancellationToken,
    ) -> Result<Landed, StorageError> {
        let Landing {
            key,
            path,
            sha256,
            content_type,
            ..
        } = *landing;
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        let sent = self
            .store
            .put_file(key, path, content_type, sha256, cancel)
            .await?;
        if sha256.is_none() {
            return Ok(Landed {
                put: true,
                size: i64::try_from(sent).unwrap_or(i64::MAX),
                sha256: None,
            });
        }
        match self.store.head(key).await? {
            Some(head) => Ok(Landed {
                put: true,
                size: head.size,
                sha256: head.sha256,
            }),
            None => Err(StorageError {
                op: "HeadObject",
                key: key.to_owned(),
                source: Box::new(std::io::Error::other(
                    "the object is missing right after its PUT",
                )),
                outage: false,
            }),
        }
    }

    /// The confirm's one transaction (upload CAS, video, job, `video.accepted`).
    pub(super) async fn confirm(&self, row: &ClaimedUpload, file: &Path, put: bool) -> Outcome {
        let owner = row.owner_id;
        let upload = row.id;
        let key = row.object_key.clone();
        let accepted = async {
            let mut conn = self.pool.get().await.map_err(db::DbError::from)?;
            crate::app::uploads::accept(&mut conn, owner, upload, &key).await
        }
        .await;
        match accepted {
            Ok(accepted) => {
                if accepted.is_some() {
                    self.stats.confirmed.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(put, "upload through vidq landed in S3 and confirmed");
                }
                // The bytes are in S3 and the contract is closed: the spool copy is done.
                if let Err(error) = tokio::fs::remove_file(file).await {
                    tracing::warn!(%error, "could not remove the spool file");
                }
                if accepted.is_some() {
                    Outcome::Stored
                } else {
                    Outcome::Overtaken
                }
            }
            Err(AppError::Upload(UploadError::UploadClosed { state })) => {
                tracing::info!(%state, "upload closed before the sweeper confirmed it");
                Outcome::Overtaken
            }
            Err(error) => {
                self.fail(
                    Held::Upload(row.id),
                    row.tries,
                    &format!("confirm failed: {}", crate::telemetry::error_chain(&error)),
                )
                .await
            }
        }
    }

    /// A failed S3 call: the row backs off; the breaker counts it only when S3 itself is
    /// failing (no answer, a 5xx, a 429). S3 refusing this one request (a 4xx) shows S3 is
    /// up, so one bad row cannot stop the uploads of every other.
    pub(super) async fn storage_failed(
        &self,
        row: Held,
        tries: i32,
        error: &StorageError,
    ) -> Outcome {
        let transition = {
            let mut breaker = self.breaker.locked();
            if error.outage {
                breaker.on_failure(Instant::now())
            } else {
                breaker.on_success()
            }
        };
        self.note(transition);
        self.fail(row, tries, &crate::telemetry::error_chain(error))
            .await
    }

    /// Stores the failure and the row's next try on the row (`tries` failed so far).
    pub(super) async fn fail(&self, row: Held, tries: i32, error: &str) -> Outcome {
        self.stats.failed.fetch_add(1, Ordering::Relaxed);
        let failures = u32::try_from(tries).unwrap_or(0).saturating_add(1);
        let delay = self.settings.backoff.delay(failures, rand::random::<f64>());
        tracing::info!(
            ?row,
            failures,
            delay_ms = delay.as_millis() as u64,
            error,
            "upload try failed; backing off"
        );
        let secs = delay.as_secs_f64();
        let stored = async {
            let mut conn = self.pool.get().await?;
            match row {
                Held::Upload(id) => {
                    db::uploads::sweep::record_failure(&mut conn, id, secs, error).await
                }
                Held::File(id) => {
                    db::recordings::record_file_failure(&mut conn, id, secs, error).await
                }
            }
            .map_err(db::DbError::from)
        }
        .await;
        if let Err(error) = stored {
            // The claim lapses on its own; the row is tried again then.
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not record the failed try");
        }
        Outcome::Failed
    }

    /// Refuses the row for good (never PUT, never tried again).
    pub(super) async fn reject(
        &self,
        row: Held,
        spool_path: Option<&str>,
        reason: RejectReason,
    ) -> Outcome {
        let stored = async {
            let mut conn = self.pool.get().await?;
            match row {
                Held::Upload(id) => db::uploads::sweep::reject(&mut conn, id, reason).await,
                Held::File(id) => {
                    let path = spool_path.unwrap_or_default();
                    db::recordings::reject_file(&mut conn, id, path, reason).await
                }
            }
            .map_err(db::DbError::from)
        }
        .await;
        match stored {
            // A recording file sent again since the claim: its row names the new version,
            // which the next claim checks. The refused one was this claim's, not the row's.
            Ok(0) if matches!(row, Held::File(_)) => {
                tracing::debug!(
                    ?row,
                    "a file sent again replaced the one refused; not rejected"
                );
                self.release(row).await;
                return Outcome::Overtaken;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not record the rejection");
            }
        }
        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(?row, reason = reason.as_str(), spool_path = ?spool_path, "rejected at the file boundary");
        Outcome::Rejected
    }

    /// Gives the claim back without a try.
    pub(super) async fn release(&self, row: Held) {
        let released = async {
            let mut conn = self.pool.get().await?;
            match row {
                Held::Upload(id) => db::uploads::sweep::release(&mut conn, &[id]).await,
                Held::File(id) => db::recordings::release_files(&mut conn, &[id]).await,
            }
            .map_err(db::DbError::from)
        }
        .await;
        if let Err(error) = released {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not release a claim");
        }
    }
}
