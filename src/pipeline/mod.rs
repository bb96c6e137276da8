//! One encoding attempt, between its claim and its finalize: download the original, probe
//! it, encode it, and put the outputs under the attempt's own S3 prefix with every object in
//! the artifact ledger. No transaction is open while any of this runs (invariant I7); each
//! ledger write is its own short statement.

pub mod outputs;

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::adapters::ffmpeg::{MediaConfig, encode, probe};
use crate::adapters::storage::Storage;
use crate::db::DbPool;
use crate::domain::ids::VideoId;
use crate::domain::media::{MediaError, MediaInfo};

/// What an attempt works on.
#[derive(Clone, Debug)]
pub struct AttemptPlan {
    /// The video.
    pub video: VideoId,
    /// The attempt number (1 to `MAX_ATTEMPTS`): it names the output prefix.
    pub attempt: i32,
    /// Where the original is.
    pub original_key: String,
}

/// Keys of the playable outputs, for the finalize to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaybackKeys {
    /// HLS playlist.
    pub hls: String,
    /// Progressive MP4.
    pub mp4: String,
    /// Thumbnail.
    pub thumbnail: String,
}

/// A successful attempt.
#[derive(Clone, Debug)]
pub struct AttemptOutput {
    /// What the probe found.
    pub media: MediaInfo,
    /// Where the outputs are.
    pub keys: PlaybackKeys,
}

impl AttemptOutput {
    /// The output an attempt would report for `plan` without encoding anything: keys under
    /// its attempt prefix and made-up media facts. For queue benchmarks and tests, whose job
    /// bodies skip the media work.
    pub fn placeholder(plan: &AttemptPlan) -> Self {
        let key = |name: &str| crate::domain::keys::attempt_object(plan.video, plan.attempt, name);
        Self {
            media: MediaInfo {
                container: "mov,mp4,m4a,3gp,3g2,mj2".into(),
                duration_ms: 1000,
                video_codec: "h264".into(),
                width: 320,
                height: 240,
                fps: 25.0,
                audio_codec: None,
            },
            keys: PlaybackKeys {
                hls: key(crate::domain::keys::outputs::PLAYLIST),
                mp4: key(crate::domain::keys::outputs::MP4),
                thumbnail: key(crate::domain::keys::outputs::THUMBNAIL),
            },
        }
    }
}

/// What an attempt needs.
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// The bucket.
    pub storage: Storage,
    /// For the artifact ledger.
    pub db: DbPool,
    /// Tools and limits.
    pub media: MediaConfig,
    /// Parent of each attempt's scratch directory.
    pub work_root: PathBuf,
}

impl Pipeline {
    /// Runs one attempt. Its scratch directory is removed when it returns, whatever happened;
    /// `cancel` kills a running FFmpeg (lost claim, shutdown).
    #[tracing::instrument(skip_all, fields(video_id = %plan.video, attempt = plan.attempt))]
    pub async fn run(
        &self,
        plan: &AttemptPlan,
        cancel: &CancellationToken,
    ) -> Result<AttemptOutput, MediaError> {
        let scratch = tempfile::Builder::new()
            .prefix("vidq-job-")
            .tempdir_in(&self.work_root)
            .map_err(|e| {
                MediaError::retryable(
                    "io_error",
                    format!("cannot create a scratch directory: {e}"),
                )
            })?;
        let original = scratch.path().join("original");
        let download = self.storage.download_to_file(&plan.original_key, &original);
        let downloaded = until_cancelled(cancel, download)
            .await?
            .map_err(outputs::storage_error)?;
        if downloaded.is_none() {
            return Err(MediaError::permanent(
                "original_missing",
                "the uploaded original is no longer in storage",
            ));
        }
        let media = probe::probe(&self.media, &original, cancel).await?;
        tracing::info!(
            duration_ms = media.duration_ms,
            width = media.width,
            height = media.height,
            "probed"
        );
        let files = encode::encode(
            &self.media,
            &media,
            &original,
            &scratch.path().join("out"),
            cancel,
        )
        .await?;
        tracing::info!(renditions = files.renditions.len(), "encoded");
        let upload = outputs::upload(&self.storage, &self.db, plan.video, plan.attempt, &files);
        let keys = until_cancelled(cancel, upload).await??;
        Ok(AttemptOutput { media, keys })
    }
}

/// Runs an S3 transfer unless the attempt is stopped first (lost claim, shutdown): a stopped
/// attempt must neither keep writing objects nor outlive the shutdown's drain. Dropping the
/// transfer aborts its request.
async fn until_cancelled<T>(
    cancel: &CancellationToken,
    transfer: impl std::future::Future<Output = T>,
) -> Result<T, MediaError> {
    tokio::select! {
        out = transfer => Ok(out),
        () = cancel.cancelled() => Err(MediaError::retryable("cancelled", "the attempt was stopped during a transfer")),
    }
}
