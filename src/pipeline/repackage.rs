//! The original of a repackage attempt (a finished live recording's job): the recording's
//! init and segments, read from S3 (where the API node's sweeper landed them), joined on this
//! worker's own scratch disk into one MP4 without re-encoding. The attempt then goes on like
//! an encode's ([`Pipeline::run`]): probe, outputs, upload; the joined original is one of its
//! outputs, put under the attempt's own key with the same ledger discipline as the others
//! (registered `pending` before the PUT, confirmed by a CAS on state and size).
//!
//! Nothing here touches an API node's disk: a worker needs PostgreSQL, S3 and scratch space,
//! so it can run on any host (docs/operations.md, "Running on several machines").

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::{Pipeline, outputs, until_cancelled};
use crate::adapters::ffmpeg::repackage;
use crate::db::{self, DbError};
use crate::domain::ids::{RecordingId, VideoId};
use crate::domain::media::MediaError;
use crate::domain::recording::FileAxis;

/// How often the attempt reads the ledger while the sweeper lands the recording's files.
const LEDGER_POLL: Duration = Duration::from_millis(250);

fn db_error(err: impl Into<DbError>) -> MediaError {
    outputs::storage_error(err.into())
}

fn io_error(what: &str, err: &std::io::Error) -> MediaError {
    MediaError::retryable(
        crate::domain::failure::FailureCode::IoError,
        format!("{what}: {err}"),
    )
}

impl Pipeline {
    /// Joins the recording of the attempt's video into `original` (see the module's text).
    pub(super) async fn live_original(
        &self,
        video: VideoId,
        scratch: &Path,
        original: &Path,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        let recording = {
            let mut conn = self.db.get().await.map_err(db_error)?;
            db::recordings::videos::recording_of(&mut conn, video)
                .await
                .map_err(db_error)?
                .ok_or_else(|| {
                    MediaError::permanent(
                        crate::domain::failure::FailureCode::RecordingIncomplete,
                        "the video has no recording",
                    )
                })?
        };
        self.wait_until_landed(recording, cancel).await?;
        self.join(recording, scratch, original, cancel).await
    }

    /// Waits (at most `waits.landing`) until none of the recording's files is `pending`.
    async fn wait_until_landed(
        &self,
        recording: RecordingId,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        let deadline = Instant::now() + self.waits.landing;
        let mut said = false;
        loop {
            let pending = {
                let mut conn = self.db.get().await.map_err(db_error)?;
                until_cancelled(
                    cancel,
                    db::recordings::videos::pending_files(&mut conn, recording),
                )
                .await?
                .map_err(db_error)?
            };
            if pending == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(MediaError::retryable(
                    crate::domain::failure::FailureCode::RecordingPending,
                    format!("{pending} of the recording's files are not in storage yet"),
                ));
            }
            if !said {
                tracing::info!(
                    pending,
                    "waiting for the sweeper to land the rest of the recording"
                );
                said = true;
            }
            until_cancelled(cancel, tokio::time::sleep(LEDGER_POLL)).await?;
        }
    }

    /// Downloads the init and every kept segment, concatenates them and joins that into
    /// `original`.
    async fn join(
        &self,
        recording: RecordingId,
        scratch: &Path,
        original: &Path,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        let files = {
            let mut conn = self.db.get().await.map_err(db_error)?;
            db::recordings::videos::kept_files(&mut conn, recording)
                .await
                .map_err(db_error)?
        };
        let starts_with_init = files.first().is_some_and(|f| f.axis == FileAxis::Init);
        if !starts_with_init || files.len() < 2 {
            return Err(MediaError::permanent(
                crate::domain::failure::FailureCode::RecordingIncomplete,
                "the recording has no init or no segment in storage",
            ));
        }
        let joined = scratch.join("joined.mp4");
        let part = scratch.join("part");
        let mut out = tokio::fs::File::create(&joined)
            .await
            .map_err(|e| io_error("creating the joined file", &e))?;
        for file in &files {
            let got = self
                .download_patiently(&file.object_key, &part, cancel)
                .await?;
            if got != u64::try_from(file.size_bytes).ok() {
                return Err(MediaError::retryable(
                    crate::domain::failure::FailureCode::RecordingIncomplete,
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
        let _ = tokio::fs::remove_file(&part).await;
        repackage::join(&self.media, &joined, original, cancel).await?;
        // The joined copy is not needed any more; the scratch directory goes at the end.
        let _ = tokio::fs::remove_file(&joined).await;
        tracing::info!(
            files = files.len(),
            "joined the recording without re-encoding"
        );
        Ok(())
    }
}
