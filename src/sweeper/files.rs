//! The sweeper's second ledger: live recordings' init and segment files
//! (`recording_files`), read through a forward cursor of their own, queued beside the
//! uploads, and landed by the same workers with the same file boundary, breaker, HEAD
//! before PUT and backoff; the CAS is `pending -> uploaded` on the size and digest the
//! ledger holds.

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::work::{Held, Landed, Landing, Outcome, Work};
use super::{Round, Shared, SweepStore, Sweeper};
use crate::adapters::spool::SpoolCheck;
use crate::db::{self, recordings::ClaimedFile};

impl<S: SweepStore> Sweeper<S> {
    /// Claims a page of due recording files through their cursor and offers them to the
    /// queue after the round's uploads; what a full queue refuses is released.
    pub(super) async fn offer_files(&mut self, round: &mut Round) -> Result<(), db::DbError> {
        let shared = &self.shared;
        let files = {
            let mut conn = shared.pool.get().await?;
            db::recordings::claim_files(
                &mut conn,
                &shared.settings.node_id,
                self.file_cursor.after(),
                i64::from(self.file_cursor.page()),
                shared.settings.claim.as_secs_f64(),
            )
            .await?
        };
        let read = files.len();
        let last_read = files.last().map(|f| f.id);
        let mut last_queued = None;
        let mut refused = Vec::new();
        for file in files {
            let id = file.id;
            if !refused.is_empty() {
                refused.push(id);
                continue;
            }
            match self.queue.try_send(Work::File(file)) {
                Ok(()) => {
                    round.files_queued += 1;
                    last_queued = Some(id);
                }
                Err(mpsc::error::TrySendError::Full(_) | mpsc::error::TrySendError::Closed(_)) => {
                    refused.push(id);
                }
            }
        }
        if !refused.is_empty() {
            shared
                .stats
                .saturated
                .fetch_add(refused.len() as u64, Ordering::Relaxed);
            let mut conn = shared.pool.get().await?;
            db::recordings::release_files(&mut conn, &refused).await?;
        }
        shared
            .stats
            .queued
            .fetch_add(round.files_queued as u64, Ordering::SeqCst);
        self.file_cursor.advance(read, last_read, last_queued);
        Ok(())
    }
}

impl<S: SweepStore> Shared<S> {
    /// One recording file, from the file boundary to the CAS.
    #[tracing::instrument(skip_all, fields(file_id = file.id, recording_id = %file.recording_id))]
    pub(super) async fn upload_file(
        &self,
        file: &ClaimedFile,
        cancel: &CancellationToken,
    ) -> Outcome {
        let path = match self.checked_file(file).await {
            Ok(path) => path,
            Err(outcome) => return outcome,
        };
        let content_type = if file.object_key.ends_with(".m4s") {
            "video/iso.segment"
        } else {
            "video/mp4"
        };
        // The size and digest S3 holds are what the CAS checks: a file sent again between the
        // claim and the CAS (other bytes, of any length) changed the row, which is then not
        // marked with what S3 holds; its next try PUTs the new version.
        let landed = match self
            .land(
                Held::File(file.id),
                file.tries,
                Landing {
                    key: &file.object_key,
                    path: &path,
                    size: file.size_bytes,
                    sha256: file.content_sha256.as_deref(),
                    content_type,
                },
                cancel,
            )
            .await
        {
            Ok(landed) => landed,
            Err(outcome) => return outcome,
        };
        self.mark_uploaded(file, &path, landed).await
    }

    /// The file's spool copy at the file boundary, or how the row ended when it cannot be
    /// sent (another size than the ledger's, refused, unreadable).
    async fn checked_file(&self, file: &ClaimedFile) -> Result<std::path::PathBuf, Outcome> {
        match self.root.check(Some(&file.spool_path)) {
            SpoolCheck::File { path, size } if i64::try_from(size) == Ok(file.size_bytes) => {
                Ok(path)
            }
            // The encoder sent the file again since the claim: its row holds the new size
            // now, and the next try PUTs that.
            SpoolCheck::File { size, .. } => {
                let error = format!(
                    "the spool file has {size} bytes, the ledger {}",
                    file.size_bytes
                );
                Err(self.fail(Held::File(file.id), file.tries, &error).await)
            }
            SpoolCheck::Refused(reason) => Err(self
                .reject(Held::File(file.id), Some(&file.spool_path), reason)
                .await),
            SpoolCheck::Unreadable(error) => {
                let error = format!("spool file unreadable: {error}");
                Err(self.fail(Held::File(file.id), file.tries, &error).await)
            }
        }
    }

    /// The CAS `pending -> uploaded` with what S3 holds, and the spool copy removed once it
    /// holds.
    async fn mark_uploaded(
        &self,
        file: &ClaimedFile,
        path: &std::path::Path,
        landed: Landed,
    ) -> Outcome {
        let marked = async {
            let mut conn = self.pool.get().await?;
            db::recordings::mark_file_uploaded(
                &mut conn,
                file.id,
                landed.size,
                landed.sha256.as_deref(),
                &file.spool_path,
            )
            .await
            .map_err(db::DbError::from)
        }
        .await;
        match marked {
            Ok(1) => {
                self.stats.files_uploaded.fetch_add(1, Ordering::Relaxed);
                // S3 holds it as the ledger says: the spool copy is done.
                if let Err(error) = tokio::fs::remove_file(path).await {
                    tracing::warn!(%error, "could not remove a recording file's spool copy");
                }
                Outcome::Stored
            }
            // The file was sent again with another size meanwhile: its next try PUTs that.
            Ok(_) => {
                self.release(Held::File(file.id)).await;
                Outcome::Overtaken
            }
            Err(error) => {
                self.fail(
                    Held::File(file.id),
                    file.tries,
                    &format!(
                        "marking it uploaded failed: {}",
                        crate::telemetry::error_chain(&error)
                    ),
                )
                .await
            }
        }
    }
}

impl<S: SweepStore> Shared<S> {
    /// This node's live recordings: those idle for `live_idle` end (`idle`), those never
    /// streamed to for `live_waiting_ttl` end (`expired`), those past
    /// their cutoff become `ended`, and ended ones whose files are all in S3 become videos.
    pub(super) async fn end_recordings(&self) -> Result<(), db::DbError> {
        let mut conn = self.pool.get().await?;
        let idle = db::recordings::end_idle(
            &mut conn,
            &self.settings.node_id,
            self.settings.live_idle.as_secs_f64(),
            self.settings.live_grace.as_secs_f64(),
        )
        .await?;
        for id in &idle {
            tracing::info!(recording_id = %id, "live recording ended: nothing arrived for VIDQ_LIVE_IDLE_SECS");
        }
        let expired = db::recordings::expire_waiting(
            &mut conn,
            &self.settings.node_id,
            self.settings.live_waiting_ttl.as_secs_f64(),
            self.settings.live_grace.as_secs_f64(),
        )
        .await?;
        for id in &expired {
            tracing::info!(recording_id = %id, "live recording expired: nothing was streamed to it for VIDQ_LIVE_WAITING_TTL_SECS");
        }
        let closed = db::recordings::close_past_cutoff(&mut conn, &self.settings.node_id).await?;
        if closed > 0 {
            tracing::info!(
                count = closed,
                "live recordings past their cutoff are final"
            );
        }
        drop(conn);
        let settled =
            crate::app::live_videos::settle_ended(&self.pool, &self.settings.node_id).await?;
        // A settled recording owes S3 nothing: its spool directory is empty by now (each
        // copy went once landed), so it goes too, rather than one empty directory per
        // broadcast forever. `remove_dir` leaves a directory that still holds anything.
        let finals = settled
            .videos
            .iter()
            .map(|(id, _)| id)
            .chain(&settled.failed);
        for id in finals {
            let dir = self.root.path().join("live").join(id.to_string());
            match std::fs::remove_dir(&dir) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::debug!(%error, recording_id = %id, "kept a final recording's spool directory");
                }
            }
        }
        Ok(())
    }
}
