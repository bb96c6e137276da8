//! The attempts of a split video (docs/architecture.md, "One long video on every worker"):
//! the head's plan after its probe, a part (a chunk's renditions, or the whole audio) stored
//! under the part's attempt prefix, and the stitch that joins the parts, checks the result
//! and stores the playback outputs like any encode.

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::{AttemptPlan, Attempted, Handed, Pipeline, outputs, until_cancelled};
use crate::adapters::ffmpeg::{encode, split};
use crate::db;
use crate::domain::artifact::Axis;
use crate::domain::failure::FailureCode;
use crate::domain::job::JobKind;
use crate::domain::job::MAX_ATTEMPTS;
use crate::domain::keys;
use crate::domain::media::{MediaError, MediaInfo};
use crate::domain::split::{Fallback, SplitPlan, StreamTiming};
use crate::domain::timeline::{NoTimeline, Timeline};

fn db_error(err: impl Into<db::DbError>) -> MediaError {
    outputs::storage_error(err.into())
}

/// A rendition's chunk file, as a part stores it and the stitch reads it.
fn chunk_name(rendition: usize) -> String {
    format!("v{rendition}.ts")
}

/// The audio part's file.
const AUDIO_NAME: &str = "audio.ts";

impl Pipeline {
    /// After an encode's probe and timing probe: the plan that splits `media` into parts, or
    /// `None` to encode it as one job (why is logged). Only a source long enough to split pays
    /// for the read of its job's plan. The last attempt is never split: the stitch needs an
    /// attempt of its own (I6 counts the planning, the stitch and a fallback in one budget).
    pub(super) async fn plan_split(
        &self,
        plan: &AttemptPlan,
        media: &MediaInfo,
        timing: &StreamTiming,
        timeline: Result<&Timeline, NoTimeline>,
        cancel: &CancellationToken,
    ) -> Result<Option<SplitPlan>, MediaError> {
        let settings = self.media.split;
        if settings.min_source_secs == 0
            || media.duration_ms <= i64::from(settings.min_source_secs) * 1000
        {
            return Ok(None);
        }
        if plan.attempt >= MAX_ATTEMPTS {
            tracing::info!("encoding whole: the last attempt leaves none for a stitch");
            return Ok(None);
        }
        let head = self.head_plan(plan.job_id, cancel).await?;
        if head.whole {
            tracing::info!("encoding whole: this video's split encode failed before");
            return Ok(None);
        }
        let sides = encode::rungs(&self.media, media)
            .into_iter()
            .map(|rung| rung.short_side)
            .collect();
        match crate::domain::split::decide(settings, media, timing, timeline, sides) {
            Ok(split) => {
                tracing::info!(
                    chunks = split.chunks(),
                    frames = split.frames,
                    rate = %split.rate.ffmpeg(),
                    audio = split.has_audio,
                    "split into parts"
                );
                Ok(Some(split))
            }
            Err(because) => {
                tracing::info!(reason = because.sentence(), "encoding whole");
                Ok(None)
            }
        }
    }

    /// The plan, run and `whole` flag of the head job `head`.
    async fn head_plan(
        &self,
        head: i64,
        cancel: &CancellationToken,
    ) -> Result<db::jobs::parts::HeadPlan, MediaError> {
        let read = async {
            let mut conn = self.db.get().await.map_err(db_error)?;
            db::jobs::parts::head_plan(&mut conn, head)
                .await
                .map_err(db_error)
        };
        until_cancelled(cancel, read)
            .await??
            .ok_or_else(|| MediaError::retryable(FailureCode::ClaimLost, "the video's job is gone"))
    }

    /// The split plan stored on the head job `head`.
    async fn split_plan(
        &self,
        head: i64,
        cancel: &CancellationToken,
    ) -> Result<SplitPlan, MediaError> {
        let stored = self.head_plan(head, cancel).await?.plan.ok_or_else(|| {
            MediaError::retryable(FailureCode::ClaimLost, "the video's job has no plan")
        })?;
        serde_json::from_value(stored).map_err(|e| {
            MediaError::retryable(
                FailureCode::InternalError,
                format!("the stored plan is unreadable: {e}"),
            )
        })
    }

    /// A part's attempt: the original from S3, this part encoded (a chunk's every rendition
    /// from one decode, or the whole audio), stored under the part's attempt prefix.
    pub(super) async fn run_part(
        &self,
        plan: &AttemptPlan,
        scratch: &Path,
        cancel: &CancellationToken,
    ) -> Result<Attempted, MediaError> {
        let Some((head, part)) = plan.part_of else {
            return Err(MediaError::retryable(
                FailureCode::InternalError,
                "a part's job has no head",
            ));
        };
        let split = self.split_plan(head, cancel).await?;
        let original = scratch.join("original");
        self.download_original(plan, &original, cancel).await?;
        // The video's other parts read it too: kept for those this worker takes.
        self.originals().keep(&plan.original_key, &original);
        let out = scratch.join("out");
        let key = |name: &str| keys::part_object(plan.video, plan.run, part, plan.attempt, name);
        let files: Vec<outputs::Planned> = match plan.kind {
            JobKind::Chunk => {
                let range = split.chunk(part).ok_or_else(|| {
                    MediaError::retryable(
                        FailureCode::InternalError,
                        format!("the plan has no chunk {part}"),
                    )
                })?;
                let files =
                    match split::encode_chunk(&self.media, &split, range, &original, &out, cancel)
                        .await?
                    {
                        Ok(files) => files,
                        Err(fault) => {
                            // Encoding it again would meet the same frames: the whole encode
                            // keeps the source's own timeline.
                            return Ok(Attempted::Handed(Handed::Unsplittable(
                                Fallback::ChunkCheck,
                                fault,
                            )));
                        }
                    };
                tracing::info!(
                    part,
                    first = range.first,
                    frames = range.end - range.first,
                    "chunk encoded"
                );
                files
                    .into_iter()
                    .enumerate()
                    .map(|(n, path)| (Axis::Chunk, n as i32, key(&chunk_name(n)), path))
                    .collect()
            }
            _ => {
                tokio::fs::create_dir_all(&out).await.map_err(|e| {
                    MediaError::retryable(FailureCode::IoError, format!("local disk: {e}"))
                })?;
                let path = out.join(AUDIO_NAME);
                split::encode_audio(&self.media, &split, &original, &path, cancel).await?;
                tracing::info!(part, "audio encoded");
                vec![(Axis::Audio, 0, key(AUDIO_NAME), path)]
            }
        };
        outputs::upload_part(
            &self.storage,
            &self.db,
            plan,
            files,
            self.waits.storage,
            cancel,
        )
        .await?;
        Ok(Attempted::Handed(Handed::PartStored))
    }

    /// The stitch: every part's files from S3, joined and muxed once into the playback
    /// outputs, checked against the plan, and stored under the stitch's attempt prefix. A
    /// result that fails a check is not stored: this attempt encodes the video whole instead,
    /// so a fallback needs no attempt of its own, whatever this one's number.
    pub(super) async fn run_stitch(
        &self,
        plan: &AttemptPlan,
        scratch: &Path,
        cancel: &CancellationToken,
    ) -> Result<Attempted, MediaError> {
        let split = self.split_plan(plan.job_id, cancel).await?;
        let parts_dir = scratch.join("parts");
        let (chunks, audio) = self
            .download_parts(plan, &split, &parts_dir, cancel)
            .await?;
        let out = scratch.join("out");
        let files =
            split::stitch(&self.media, &split, &chunks, audio.as_deref(), &out, cancel).await?;
        if let Err(fault) =
            split::check_stitched(&self.media, &split, &files.mp4, scratch, cancel).await?
        {
            tracing::error!(%fault, "the stitched video failed its checks; encoding it whole instead");
            crate::metrics::SPLIT_FALLBACKS
                .with_label_values(&[Fallback::StitchCheck.label()])
                .inc();
            let _ = tokio::fs::remove_dir_all(&parts_dir).await;
            let _ = tokio::fs::remove_dir_all(&out).await;
            return self.encode_whole_now(plan, scratch, cancel).await;
        }
        tracing::info!(
            chunks = split.chunks(),
            frames = split.frames,
            "stitched and checked"
        );
        self.store(plan, MediaInfo::from(&split.media), &files, None, cancel)
            .await
    }

    /// Every part's files of the current run into `parts_dir`: each rendition's chunks in order
    /// (`[rendition][part]`), and the audio if there is one.
    async fn download_parts(
        &self,
        plan: &AttemptPlan,
        split: &SplitPlan,
        parts_dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<(Vec<Vec<PathBuf>>, Option<PathBuf>), MediaError> {
        let done = {
            let read = async {
                let mut conn = self.db.get().await.map_err(db_error)?;
                db::jobs::parts::done_parts(&mut conn, plan.job_id)
                    .await
                    .map_err(db_error)
            };
            until_cancelled(cancel, read).await??
        };
        let attempt_of = |part: i32| {
            done.iter()
                .find(|d| d.part == part)
                .map(|d| d.attempt)
                .ok_or_else(|| {
                    MediaError::retryable(
                        FailureCode::InternalError,
                        format!("part {part} is not done"),
                    )
                })
        };
        tokio::fs::create_dir_all(parts_dir)
            .await
            .map_err(|e| MediaError::retryable(FailureCode::IoError, format!("local disk: {e}")))?;
        let mut chunks: Vec<Vec<PathBuf>> = vec![Vec::new(); split.short_sides.len()];
        for part in 0..split.chunks() {
            let attempt = attempt_of(part)?;
            for (n, files) in chunks.iter_mut().enumerate() {
                let key = keys::part_object(plan.video, plan.run, part, attempt, &chunk_name(n));
                let path = parts_dir.join(format!("c{part:05}_v{n}.ts"));
                self.download_part(&key, &path, cancel).await?;
                files.push(path);
            }
        }
        let audio = match split.audio_part() {
            Some(part) => {
                let key =
                    keys::part_object(plan.video, plan.run, part, attempt_of(part)?, AUDIO_NAME);
                let path = parts_dir.join(AUDIO_NAME);
                self.download_part(&key, &path, cancel).await?;
                Some(path)
            }
            None => None,
        };
        Ok((chunks, audio))
    }

    /// The whole encode of a split video, in this attempt: its original again (this worker's
    /// kept copy, or S3), probed, timed and encoded as any upload is.
    async fn encode_whole_now(
        &self,
        plan: &AttemptPlan,
        scratch: &Path,
        cancel: &CancellationToken,
    ) -> Result<Attempted, MediaError> {
        let original = scratch.join("original");
        self.download_original(plan, &original, cancel).await?;
        let media = crate::adapters::ffmpeg::probe::probe(&self.media, &original, cancel).await?;
        let timeline = encode::measured_timeline(&self.media, &original, scratch, cancel).await?;
        self.encode_whole(plan, media, timeline.as_ref(), &original, scratch, cancel)
            .await
    }

    /// A part's stored file into `to`; a part whose file is gone is an error another attempt
    /// of the stitch will meet too, so the stitch fails its attempt (retryable) and says so.
    async fn download_part(
        &self,
        key: &str,
        to: &Path,
        cancel: &CancellationToken,
    ) -> Result<(), MediaError> {
        match self.download_patiently(key, to, cancel).await? {
            Some(_) => Ok(()),
            None => {
                tracing::warn!(%key, "a stored part is missing");
                Err(MediaError::retryable(
                    FailureCode::StorageError,
                    "a part of the split video is missing from storage",
                ))
            }
        }
    }
}
