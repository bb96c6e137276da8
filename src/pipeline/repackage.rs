//! The original of a repackage attempt (a finished live recording's job): join the
//! recording's init and segments from S3 into its original axis without re-encoding, and
//! hand that MP4 to the ledger (spooled under this worker's allowed root, registered
//! `pending`, landed by its node's sweeper with the same CAS as every recording file). The
//! attempt then goes on like an encode's ([`Pipeline::run`]): probe, outputs, upload.
//!
//! The original is the ledger's, not this attempt's: an attempt that finds it `uploaded`
//! (an earlier attempt got that far) downloads it instead of joining again, and one that
//! stops while the sweeper has not landed it leaves the row `pending` for the sweeper.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{AttemptPlan, Pipeline, outputs, until_cancelled};
use crate::adapters::ffmpeg::repackage;
use crate::adapters::spool::{SpoolCheck, SpoolRoot};
use crate::db::{self, DbError, live_videos::NewOriginal};
use crate::domain::media::MediaError;
use crate::domain::recording::{self, FileAxis, FileState};

/// Where a worker keeps the originals it joins until they are in S3.
#[derive(Clone, Debug)]
pub struct LiveOriginals {
    /// The allowed root (`VIDQ_SPOOL_DIR`), shared with this node's sweeper; opened (and
    /// made) by the first repackage attempt, so a worker that never gets one never makes it.
    pub spool_dir: PathBuf,
    /// This node's name: its sweeper lands the rows registered under it.
    pub node: String,
    /// How long an attempt waits for the sweeper to land the original before it gives the
    /// job back to be tried again (the row stays `pending` meanwhile).
    pub wait: Duration,
}

/// How long a worker's repackage attempt waits for its node's sweeper to land the original
/// (well inside the attempt's deadline; the heartbeat keeps the lease meanwhile).
pub const ORIGINAL_WAIT: Duration = Duration::from_secs(120);

/// How often the attempt reads the original's row while the sweeper lands it.
const LEDGER_POLL: Duration = Duration::from_millis(200);

fn db_error(err: impl Into<DbError>) -> MediaError {
    outputs::storage_error(err.into())
}

fn io_error(what: &str, err: &std::io::Error) -> MediaError {
    MediaError::retryable("io_error", format!("{what}: {err}"))
}

impl Pipeline {
    /// Puts a recording's original at `original` (see the module's text): downloaded when
    /// the ledger has it in S3, else joined in `scratch` and landed through the ledger.
    pub(super) async fn live_original(
        &self,
        plan: &AttemptPlan,
        scratch: &Path,
        original: &Path,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        let live = self.live.as_ref().ok_or_else(|| {
            MediaError::retryable(
                "io_error",
                "this worker has no spool for live originals (VIDQ_SPOOL_DIR)",
            )
        })?;
        let spool = SpoolRoot::open(&live.spool_dir)
            .map_err(|e| io_error("cannot open the spool (VIDQ_SPOOL_DIR)", &e.source))?;
        let recording = {
            let mut conn = self.db.get().await.map_err(db_error)?;
            db::live_videos::recording_of(&mut conn, plan.video.0)
                .await
                .map_err(db_error)?
                .ok_or_else(|| {
                    MediaError::permanent("recording_incomplete", "the video has no recording")
                })?
        };
        let row = {
            let mut conn = self.db.get().await.map_err(db_error)?;
            db::live_videos::original(&mut conn, recording)
                .await
                .map_err(db_error)?
        };
        // An earlier attempt on this node spooled it and the sweeper has not landed it yet:
        // that file is the original; wait for it rather than join again (unless it is gone
        // by now, landed and removed, or unreadable: then the row is read anew below).
        let reusable = match &row {
            Some(row)
                if row.state == FileState::Pending.as_str()
                    && row.node_id == live.node
                    && matches!(spool.check(Some(&row.spool_path)),
                            SpoolCheck::File { size, .. } if i64::try_from(size) == Ok(row.size_bytes)) =>
            {
                let copied = tokio::fs::copy(spool.path().join(&row.spool_path), original).await;
                copied.is_ok().then(|| row.spool_path.clone())
            }
            _ => None,
        };
        match (row, reusable) {
            (Some(row), _) if row.state == FileState::Uploaded.as_str() => {
                self.fetch_original(recording, original, cancel).await
            }
            (_, Some(path)) => {
                self.wait_landed(live, &spool, recording, original, &path, cancel)
                    .await
            }
            _ => {
                self.join(recording, scratch, original, cancel).await?;
                self.land(plan, live, &spool, recording, original, cancel)
                    .await
            }
        }
    }

    /// The original an earlier attempt landed, from S3.
    async fn fetch_original(
        &self,
        recording: Uuid,
        original: &Path,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        let key = recording::original_key(recording);
        let got = until_cancelled(cancel, self.storage.download_to_file(&key, original))
            .await?
            .map_err(outputs::storage_error)?;
        match got {
            Some(_) => Ok(()),
            // The ledger says uploaded and the bucket disagrees: `vidq reconcile` reports it.
            None => Err(MediaError::retryable(
                "original_missing",
                "the joined recording is not in storage although its ledger row says so",
            )),
        }
    }

    /// Downloads the init and every kept segment, concatenates them and joins that into
    /// `original`.
    async fn join(
        &self,
        recording: Uuid,
        scratch: &Path,
        original: &Path,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        let files = {
            let mut conn = self.db.get().await.map_err(db_error)?;
            db::live_videos::kept_files(&mut conn, recording)
                .await
                .map_err(db_error)?
        };
        let starts_with_init = files
            .first()
            .is_some_and(|f| f.axis == FileAxis::Init.as_str());
        if !starts_with_init || files.len() < 2 {
            return Err(MediaError::permanent(
                "recording_incomplete",
                "the recording has no init or no segment in storage",
            ));
        }
        let joined = scratch.join("joined.mp4");
        let part = scratch.join("part");
        let mut out = tokio::fs::File::create(&joined)
            .await
            .map_err(|e| io_error("creating the joined file", &e))?;
        for file in &files {
            let got = until_cancelled(
                cancel,
                self.storage.download_to_file(&file.object_key, &part),
            )
            .await?
            .map_err(outputs::storage_error)?;
            if got != u64::try_from(file.size_bytes).ok() {
                return Err(MediaError::retryable(
                    "recording_incomplete",
                    format!(
                        "{} is not in storage with the ledger's {} bytes",
                        file.object_key, file.size_bytes
                    ),
                ));
            }
            let mut input = tokio::fs::File::open(&part)
                .await
                .map_err(|e| io_error("reading a segment", &e))?;
            tokio::io::copy(&mut input, &mut out)
                .await
                .map_err(|e| io_error("writing the joined file", &e))?;
        }
        out.flush()
            .await
            .map_err(|e| io_error("writing the joined file", &e))?;
        drop(out);
        repackage::join(&self.media, &joined, original, cancel).await?;
        // The joined copy is not needed any more; the scratch directory goes at the end.
        let _ = tokio::fs::remove_file(&joined).await;
        tracing::info!(
            files = files.len(),
            "joined the recording without re-encoding"
        );
        Ok(())
    }

    /// Spools `original`, registers it `pending` (fenced on the attempt's claim) and waits
    /// until the sweeper has landed it.
    async fn land(
        &self,
        plan: &AttemptPlan,
        live: &LiveOriginals,
        spool: &SpoolRoot,
        recording: Uuid,
        original: &Path,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        let relative = recording::original_spool_path(recording, Uuid::now_v7());
        let spooled = spool.path().join(&relative);
        let size = spool_copy(original, &spooled).await?;
        let key = recording::original_key(recording);
        let new = NewOriginal {
            recording,
            object_key: &key,
            size: i64::try_from(size).unwrap_or(i64::MAX),
            spool_path: &relative,
            node: &live.node,
            claim_token: plan.claim_token,
        };
        let registered = async {
            let mut conn = self.db.get().await.map_err(db_error)?;
            until_cancelled(cancel, db::live_videos::register_original(&mut conn, &new))
                .await?
                .map_err(db_error)
        }
        .await;
        let registered = match registered {
            Ok(registered) if registered.taken => registered,
            other => {
                // No row names this file: it must not stay on the spool.
                let _ = tokio::fs::remove_file(&spooled).await;
                let registered = other?;
                if registered.state.as_deref() == Some(FileState::Uploaded.as_str()) {
                    // Landed by another attempt meanwhile: that version is the original.
                    return self.fetch_original(recording, original, cancel).await;
                }
                return Err(MediaError::retryable(
                    "original_pending",
                    "the attempt no longer holds its job",
                ));
            }
        };
        if let (Some(node), Some(old)) = (&registered.replaced_node, &registered.replaced_path)
            && node == &live.node
            && old != &relative
        {
            // An earlier attempt's version on this node: the row no longer names it.
            let _ = tokio::fs::remove_file(spool.path().join(old)).await;
        }
        tracing::info!(
            size,
            "joined recording spooled; waiting for the sweeper to land it"
        );
        self.wait_landed(live, spool, recording, original, &relative, cancel)
            .await
    }

    /// Reads the original's row until the sweeper has landed the version at `relative`: for
    /// at most `live.wait`, longer while a sweeper holds the row (its PUT is under way).
    async fn wait_landed(
        &self,
        live: &LiveOriginals,
        spool: &SpoolRoot,
        recording: Uuid,
        original: &Path,
        relative: &str,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        let deadline = Instant::now() + live.wait;
        loop {
            let row = {
                let mut conn = self.db.get().await.map_err(db_error)?;
                until_cancelled(cancel, db::live_videos::original(&mut conn, recording))
                    .await?
                    .map_err(db_error)?
            };
            let Some(row) = row else {
                return Err(MediaError::retryable(
                    "original_pending",
                    "the recording's original row is gone",
                ));
            };
            if row.spool_path != relative {
                // Another attempt registered its own version: this one's file is nobody's.
                let _ = tokio::fs::remove_file(spool.path().join(relative)).await;
                if row.state == FileState::Uploaded.as_str() {
                    return self.fetch_original(recording, original, cancel).await;
                }
                return Err(MediaError::retryable(
                    "original_pending",
                    "another attempt registered the recording's original",
                ));
            }
            if row.state == FileState::Uploaded.as_str() {
                tracing::info!("the joined recording is in S3");
                return Ok(());
            }
            if row.state == FileState::Rejected.as_str() {
                // The next attempt registers a new version over the refused one.
                return Err(MediaError::retryable(
                    "original_pending",
                    "the joined recording was refused at the spool's file boundary",
                ));
            }
            if Instant::now() >= deadline && !row.claimed {
                tracing::warn!(
                    last_error = row.last_error.as_deref().unwrap_or(""),
                    "the sweeper has not landed the joined recording yet; the row stays pending"
                );
                return Err(MediaError::retryable(
                    "original_pending",
                    "the joined recording is not in storage yet",
                ));
            }
            until_cancelled(cancel, tokio::time::sleep(LEDGER_POLL)).await?;
        }
    }
}

/// Copies `from` to `to` (a new file under the spool root) and makes it durable (file and
/// directory fsynced) before any row names it; returns its size.
async fn spool_copy(from: &Path, to: &PathBuf) -> Result<u64, MediaError> {
    let dir = to
        .parent()
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("."));
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| io_error("creating the spool directory", &e))?;
    let size = tokio::fs::copy(from, to)
        .await
        .map_err(|e| io_error("spooling the joined recording", &e))?;
    let (file, dir) = (to.clone(), dir.clone());
    tokio::task::spawn_blocking(move || {
        std::fs::File::open(&file)?.sync_all()?;
        std::fs::File::open(&dir)?.sync_all()
    })
    .await
    .map_err(|e| io_error("spooling the joined recording", &std::io::Error::other(e)))?
    .map_err(|e| io_error("syncing the spool", &e))?;
    Ok(size)
}
