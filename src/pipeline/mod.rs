//! One encoding attempt, between its claim and its finalize: get the original (an upload's
//! from S3; a live recording's joined from its files in S3 by [`repackage`]), probe it,
//! encode it (a recording's is cut into HLS again without re-encoding), and put the outputs
//! under the attempt's own S3 prefix with every object in the artifact ledger. No transaction is open while any of this runs (invariant I7); each
//! ledger write is its own short statement.

pub mod originals;
pub mod outage;
pub mod outputs;
pub mod repackage;
pub mod scratch;
pub mod split;

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::adapters::ffmpeg::{MediaConfig, encode, probe, repackage as repackage_files};
use crate::adapters::storage::Storage;
use crate::db::{DbError, DbPool};
use crate::domain::ids::{ClaimToken, VideoId};
use crate::domain::job::JobKind;
use crate::domain::keys;
use crate::domain::media::{MediaError, MediaInfo};

/// What an attempt works on.
#[derive(Clone, Debug)]
pub struct AttemptPlan {
    /// The job.
    pub job_id: i64,
    /// A part's head job and its number (`None`: the video's own job).
    pub part_of: Option<(i64, i32)>,
    /// The video.
    pub video: VideoId,
    /// The run (1, then one more per operator retry): with the attempt, it names the prefix.
    pub run: i32,
    /// The attempt number within the run (1 to `MAX_ATTEMPTS`).
    pub attempt: i32,
    /// Where the original is.
    pub original_key: String,
    /// Encode an upload, or repackage a recording.
    pub kind: crate::domain::job::JobKind,
    /// The claim's fencing token: the attempt's first ledger write is fenced on it (and
    /// commits synchronously), so nothing is written for a claim the database lost.
    pub claim_token: ClaimToken,
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
        let key = |name: &str| {
            crate::domain::keys::attempt_object(plan.video, plan.run, plan.attempt, name)
        };
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

/// How an attempt that did its work ended: what the queue records for it.
#[derive(Clone, Debug)]
pub enum Attempted {
    /// Playable outputs are stored: finalize READY.
    Ready(AttemptOutput),
    /// The video's work goes on in other jobs of a split video.
    Handed(Handed),
}

/// How a split video's attempt hands its work on.
#[derive(Clone, Debug)]
pub enum Handed {
    /// A long source was planned as parts: enqueue them, and park the job as their stitch.
    Planned(Box<crate::domain::split::SplitPlan>),
    /// A part's outputs are stored: record it (the last part wakes the stitch).
    PartStored,
    /// A part failed where the whole encode might not (its chunk failed its checks, or the
    /// part failed for good): the video is encoded whole instead.
    Unsplittable(crate::domain::split::Fallback, String),
}

impl Attempted {
    /// The playable outputs, if the attempt made them (`None`: it handed its work on).
    pub fn ready(self) -> Option<AttemptOutput> {
        match self {
            Self::Ready(output) => Some(output),
            Self::Handed(_) => None,
        }
    }
}

impl From<AttemptOutput> for Attempted {
    fn from(output: AttemptOutput) -> Self {
        Self::Ready(output)
    }
}

/// How long an attempt waits for what it reads before it counts as failed.
#[derive(Clone, Copy, Debug)]
pub struct AttemptWaits {
    /// A repackage attempt whose recording still has files `pending` in the ledger (the
    /// sweeper has not landed them) waits this long at most, then gives the job back.
    pub landing: Duration,
    /// While S3 does not answer a read or a write of an output, the attempt tries again
    /// (with backoff) for this long at most: a short outage costs no attempt.
    pub storage: Duration,
}

impl Default for AttemptWaits {
    /// Two minutes each: well inside an attempt's deadline (the heartbeat keeps the lease).
    fn default() -> Self {
        Self {
            landing: Duration::from_secs(120),
            storage: Duration::from_secs(120),
        }
    }
}

/// How long the clean-up after a READY waits out an S3 outage: it holds the worker's slot,
/// and the sweeper's orphan pass removes whatever is still left later.
const CLEANUP_PATIENCE: Duration = Duration::from_secs(30);

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
    /// How long an attempt waits for what it reads.
    pub waits: AttemptWaits,
}

impl Pipeline {
    /// Runs one attempt. Its scratch directory is removed when it returns, whatever happened
    /// (and, if this process is killed, by the next worker to start on this work root);
    /// `cancel` kills a running FFmpeg (lost claim, shutdown).
    #[tracing::instrument(skip_all, fields(video_id = %plan.video, run = plan.run, attempt = plan.attempt))]
    pub async fn run(
        &self,
        plan: &AttemptPlan,
        cancel: &CancellationToken,
    ) -> Result<Attempted, MediaError> {
        let scratch = scratch::Scratch::create(&self.work_root).map_err(|e| {
            MediaError::retryable(
                crate::domain::failure::FailureCode::IoError,
                format!("cannot create a scratch directory: {e}"),
            )
        })?;
        self.abort_earlier_multiparts(plan).await;
        match plan.kind {
            JobKind::Chunk | JobKind::Audio => {
                return self.run_part(plan, scratch.path(), cancel).await;
            }
            JobKind::Stitch => return self.run_stitch(plan, scratch.path(), cancel).await,
            JobKind::Encode | JobKind::Repackage => {}
        }
        let original = scratch.path().join("original");
        if plan.kind == JobKind::Repackage {
            self.live_original(plan.video, scratch.path(), &original, cancel)
                .await?;
        } else {
            self.download_original(plan, &original, cancel).await?;
        }
        let media = probe::probe(&self.media, &original, cancel).await?;
        tracing::info!(
            duration_ms = media.duration_ms,
            width = media.width,
            height = media.height,
            "probed"
        );
        if plan.kind == JobKind::Repackage {
            let out = scratch.path().join("out");
            // The recording is H.264/AAC already: its segments are cut again, not re-encoded.
            let files = repackage_files::vod(&self.media, &media, &original, &out, cancel).await?;
            // A recording's joined original is one of the attempt's outputs (an upload's is in
            // S3 already, under the key its client PUT it to).
            return self
                .store(plan, media, &files, Some(original.as_path()), cancel)
                .await;
        }
        let timing =
            crate::adapters::ffmpeg::split::timing(&self.media, &original, scratch.path(), cancel)
                .await?;
        let line = crate::domain::timeline::timeline(&timing, self.media.max_fps);
        if let Some(split) = self
            .plan_split(plan, &media, &timing, line.as_ref().map_err(|e| *e), cancel)
            .await?
        {
            // Its parts read it again: this worker keeps a copy for those it takes.
            self.originals().keep(&plan.original_key, &original);
            return Ok(Attempted::Handed(Handed::Planned(Box::new(split))));
        }
        self.encode_whole(
            plan,
            media,
            line.ok().as_ref(),
            &original,
            scratch.path(),
            cancel,
        )
        .await
    }

    /// The whole encode of `original`, whose measured timeline is `timeline` (`None`: it has
    /// none), its outputs stored under the attempt's prefix. The encode decides whether the
    /// timeline's grid shows the source faithfully ([`encode::encode`]); the facts reported
    /// (rate, length) are the timeline's either way.
    async fn encode_whole(
        &self,
        plan: &AttemptPlan,
        media: MediaInfo,
        timeline: Option<&crate::domain::timeline::Timeline>,
        original: &std::path::Path,
        scratch: &std::path::Path,
        cancel: &CancellationToken,
    ) -> Result<Attempted, MediaError> {
        let media = match timeline {
            Some(line) => media.timed_by(line),
            None => media,
        };
        let out = scratch.join("out");
        let files = encode::encode(&self.media, &media, timeline, original, &out, cancel).await?;
        tracing::info!(
            renditions = files.renditions.len(),
            rate = timeline.map(|t| t.rate.ffmpeg()),
            capped = timeline.is_some_and(|t| t.capped),
            on_grid = timeline.is_some_and(crate::domain::timeline::Timeline::faithful),
            "encoded"
        );
        self.store(plan, media, &files, None, cancel).await
    }

    /// Stores an attempt's playable outputs (and `joined`, a recording's original) under its
    /// prefix: READY is next.
    async fn store(
        &self,
        plan: &AttemptPlan,
        media: MediaInfo,
        files: &encode::EncodedFiles,
        joined: Option<&std::path::Path>,
        cancel: &CancellationToken,
    ) -> Result<Attempted, MediaError> {
        // Not dropped on a stop: it stops itself, so a multipart upload is aborted first.
        let keys = outputs::upload(
            &self.storage,
            &self.db,
            plan,
            files,
            joined,
            self.waits.storage,
            cancel,
        )
        .await?;
        Ok(Attempted::Ready(AttemptOutput { media, keys }))
    }
}

impl Pipeline {
    /// Aborts the multipart uploads an earlier attempt of this job left open: a worker killed
    /// mid-upload never aborts its own, and S3 keeps (and bills) their parts until someone
    /// does. The earlier attempt's claim is gone (this one holds the job), so whatever it was
    /// writing would be fenced out anyway. Best effort: a failure is logged, and the attempt
    /// goes on.
    async fn abort_earlier_multiparts(&self, plan: &AttemptPlan) {
        for earlier in 1..plan.attempt {
            let prefix = match plan.part_of {
                Some((_, part)) => keys::part_attempt_prefix(plan.video, plan.run, part, earlier),
                None => keys::attempt_prefix(plan.video, plan.run, earlier),
            };
            let open = match self.storage.list_multiparts(&prefix).await {
                Ok(open) => open,
                Err(error) => {
                    tracing::warn!(%prefix, error = %crate::telemetry::error_chain(&error),
                        "could not list an earlier attempt's multipart uploads");
                    continue;
                }
            };
            for (key, id) in open {
                match self.storage.abort_multipart(&key, &id).await {
                    Ok(()) => {
                        tracing::info!(%key, "aborted a multipart upload an earlier attempt left")
                    }
                    Err(error) => {
                        tracing::warn!(%key, error = %crate::telemetry::error_chain(&error),
                        "could not abort an earlier attempt's multipart upload")
                    }
                }
            }
        }
    }

    /// This worker's kept copies of originals (see [`originals`]).
    fn originals(&self) -> originals::Originals {
        originals::Originals::new(&self.work_root, self.media.originals_cache_bytes)
    }

    /// An upload's original: this worker's kept copy of it, if it has one (see
    /// [`originals`]), else from S3.
    async fn download_original(
        &self,
        plan: &AttemptPlan,
        original: &std::path::Path,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        if self.originals().take(&plan.original_key, original) {
            tracing::debug!("the original from this worker's copy");
            return Ok(());
        }
        let downloaded = self
            .download_patiently(&plan.original_key, original, cancel)
            .await?;
        if downloaded.is_none() {
            return Err(MediaError::permanent(
                crate::domain::failure::FailureCode::OriginalMissing,
                "the uploaded original is no longer in storage",
            ));
        }
        Ok(())
    }

    /// `key` into `to`; its size, or `None` when S3 does not have it. While S3 does not
    /// answer (an outage: no connection, no answer in time, a 5xx or 429), tries again with
    /// backoff for at most `waits.storage`.
    async fn download_patiently(
        &self,
        key: &str,
        to: &std::path::Path,
        cancel: &CancellationToken,
    ) -> Result<Option<u64>, MediaError> {
        let outage = outage::Outage::new(self.waits.storage);
        loop {
            match until_cancelled(cancel, self.storage.download_to_file(key, to)).await? {
                Ok(got) => return Ok(got),
                Err(error) => outage.wait_out(error, key, "reading", cancel).await?,
            }
        }
    }

    /// After a READY commit: deletes every object of the video outside the live prefix (the
    /// run's other attempts, its parts and, after an operator retry, every earlier run). The
    /// READY transaction forgot their ledger rows and owed their prefixes (`dead`) to the
    /// bucket, so this is the fast path of a debt already written down: once it is done the
    /// debt is crossed off, and if this worker dies first or S3 stays down past
    /// [`CLEANUP_PATIENCE`], a sweeper pays it (`sweeper::doomed`).
    ///
    /// The earlier runs' objects go here rather than at `vidq jobs retry`: the retry is a
    /// database-only command (no S3 settings), and deleting after the new run's READY has
    /// committed means a failed deletion can never undo or block the retry.
    pub async fn remove_superseded(
        &self,
        video: VideoId,
        live_run: i32,
        live_attempt: i32,
        dead: Vec<String>,
    ) {
        // A first attempt of a first run that was not split has no other attempt, run or
        // part (`keys::superseded_prefixes`): nothing to list, on the path of most videos.
        if dead.is_empty() {
            return;
        }
        let live = keys::attempt_prefix(video, live_run, live_attempt);
        let remove = || async {
            let all = self.storage.list_prefix(&keys::video_prefix(video)).await?;
            let stale: Vec<String> = all.into_iter().filter(|k| !k.starts_with(&live)).collect();
            self.storage.delete_keys(&stale).await
        };
        let outage = outage::Outage::new(CLEANUP_PATIENCE);
        // Nothing stops the clean-up halfway: it runs after the attempt has ended.
        let never = CancellationToken::new();
        let prefix = keys::video_prefix(video);
        let removed = loop {
            match remove().await {
                Ok(objects) => break Ok(objects),
                Err(error) => {
                    if let Err(gave_up) = outage
                        .wait_out(error, &prefix, "removing superseded outputs", &never)
                        .await
                    {
                        break Err(gave_up);
                    }
                }
            }
        };
        match removed {
            Ok(objects) => {
                if objects > 0 {
                    tracing::info!(%video, objects, "removed superseded attempts' outputs");
                }
                self.cross_off(video, &dead).await;
            }
            Err(error) => tracing::warn!(error = %error.message, %video,
                "could not remove superseded attempts' outputs; a sweeper deletes them once S3 answers"),
        }
    }

    /// Crosses off what the READY transaction owed, now deleted; if the database is away
    /// meanwhile a sweeper deletes the (now empty) prefixes again, which is harmless.
    async fn cross_off(&self, video: VideoId, dead: &[String]) {
        let crossed =
            crate::db::retrying::while_unavailable("crossing off superseded outputs", || async {
                let mut conn = self.db.get().await.map_err(DbError::Pool)?;
                crate::db::doomed_objects::paid_prefixes(&mut conn, dead)
                    .await
                    .map_err(DbError::Query)
            });
        if let Err(error) = crossed.await {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), %video,
                "could not cross off removed outputs; a sweeper lists their prefixes once more");
        }
    }
}

/// Runs a step unless the attempt is stopped first (lost claim, shutdown): a stopped attempt
/// must neither keep writing nor outlive the shutdown's drain. Only for steps that may be
/// dropped halfway (a download, a HEAD, one ledger statement); a multipart upload must not
/// be, so [`outputs::upload`] stops its transfers itself.
async fn until_cancelled<T>(
    cancel: &CancellationToken,
    transfer: impl std::future::Future<Output = T>,
) -> Result<T, MediaError> {
    tokio::select! {
            out = transfer => Ok(out),
            () = cancel.cancelled() => Err(MediaError::retryable(
    crate::domain::failure::FailureCode::Cancelled, "the attempt was stopped during a transfer")),
        }
}
