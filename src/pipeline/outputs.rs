//! Putting an attempt's outputs in S3 in playback-safe order (inits and segments, the MP4 and
//! thumbnail, then the renditions' playlists, the top playlist last) with each object registered `pending` first and
//! confirmed by a CAS on state and the size S3 reports.

use std::path::PathBuf;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::outage::Outage;
use super::{AttemptPlan, PlaybackKeys};
use crate::adapters::ffmpeg::encode::EncodedFiles;
use crate::adapters::storage::Storage;
use crate::db::{self, DbPool, artifacts::NewArtifact};
use crate::domain::artifact::Axis;
use crate::domain::keys::{self, outputs};
use crate::domain::media::MediaError;

/// Segments uploaded at once; bounds memory and S3 pressure per attempt.
const UPLOAD_CONCURRENCY: usize = 4;

struct Output {
    axis: Axis,
    sequence: i32,
    key: String,
    path: PathBuf,
    size: i64,
}

/// The video's error (and its `video.failed` event) must not carry endpoints, buckets or
/// database messages: the cause goes to the log, the record gets a fixed sentence.
pub fn storage_error(err: impl std::error::Error + 'static) -> MediaError {
    tracing::warn!(error = %crate::telemetry::error_chain(&err), "storage step failed");
    MediaError::retryable(
        crate::domain::failure::FailureCode::StorageError,
        "object storage or the database failed while storing the outputs",
    )
}

/// Uploads every output of one attempt (and `joined_original`, a recording's original joined
/// by this attempt, under [`outputs::ORIGINAL`]); returns the playback keys once all are
/// confirmed.
/// When `cancel` fires it stops, and a multipart upload under way is aborted (not dropped)
/// before it returns, so a stopped attempt leaves no parts in the bucket.
/// While S3 is out (no connection, no answer in time, a 5xx or 429), each output's PUT and
/// HEAD are tried again with backoff until `patience` has passed since the first failure:
/// an outage shorter than that costs no attempt.
pub async fn upload(
    storage: &Storage,
    pool: &DbPool,
    plan: &AttemptPlan,
    files: &EncodedFiles,
    joined_original: Option<&std::path::Path>,
    patience: std::time::Duration,
    cancel: &CancellationToken,
) -> Result<PlaybackKeys, MediaError> {
    let key = |name: &str| keys::attempt_object(plan.video, plan.run, plan.attempt, name);
    let (planned, first_playlist) = lay_out(plan, files, joined_original);
    let all = super::until_cancelled(cancel, register(pool, plan, planned)).await??;
    let (objects, playlists) = all.split_at(first_playlist);
    let outage = Outage::new(patience);
    put_in_order(storage, pool, objects, playlists, &outage, cancel).await?;
    Ok(PlaybackKeys {
        hls: key(outputs::PLAYLIST),
        mp4: key(outputs::MP4),
        thumbnail: key(outputs::THUMBNAIL),
    })
}

/// Uploads the intermediates of a part's attempt (a chunk's renditions, the audio), each
/// `(axis, sequence, key, file)`, with the same ledger discipline as [`upload`]: registered
/// `pending` (fenced on the claim) before any PUT, confirmed by a CAS on the size S3 reports.
pub async fn upload_part(
    storage: &Storage,
    pool: &DbPool,
    plan: &AttemptPlan,
    files: Vec<Planned>,
    patience: std::time::Duration,
    cancel: &CancellationToken,
) -> Result<(), MediaError> {
    let all = super::until_cancelled(cancel, register(pool, plan, files)).await??;
    put_in_order(storage, pool, &all, &[], &Outage::new(patience), cancel).await
}

/// An output before its size is known: axis, sequence, key, local file.
pub type Planned = (Axis, i32, String, PathBuf);

/// Every output with its key, in upload order, and where the playlists start (rendition
/// playlists after every segment, the top playlist, master or single, last).
fn lay_out(
    plan: &AttemptPlan,
    files: &EncodedFiles,
    joined_original: Option<&std::path::Path>,
) -> (Vec<Planned>, usize) {
    let key = |name: &str| keys::attempt_object(plan.video, plan.run, plan.attempt, name);
    // Sequence numbers keep every object of an axis distinct across the ladder's renditions.
    const PER_RENDITION: i32 = 100_000;
    let mut planned: Vec<Planned> = Vec::new();
    let mut playlists: Vec<Planned> = Vec::new();
    let ladder = files.renditions.len() > 1;
    for (r, rendition) in files.renditions.iter().enumerate() {
        let r = r as i32;
        let hls = |name: &str| key(&format!("hls/{}{name}", rendition.prefix));
        planned.push((Axis::Init, r, hls("init.mp4"), rendition.init.clone()));
        for (n, path) in rendition.segments.iter().enumerate() {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            planned.push((
                Axis::Segment,
                r * PER_RENDITION + n as i32,
                hls(&name),
                path.clone(),
            ));
        }
        if ladder {
            playlists.push((
                Axis::Playlist,
                r + 1,
                hls("index.m3u8"),
                rendition.playlist.clone(),
            ));
        }
    }
    planned.push((Axis::Mp4, 0, key(outputs::MP4), files.mp4.clone()));
    planned.push((
        Axis::Thumbnail,
        0,
        key(outputs::THUMBNAIL),
        files.thumbnail.clone(),
    ));
    if let Some(path) = joined_original {
        planned.push((Axis::Original, 0, key(outputs::ORIGINAL), path.to_owned()));
    }
    let first_playlist = planned.len();
    planned.extend(playlists);
    planned.push((
        Axis::Playlist,
        0,
        key(outputs::PLAYLIST),
        files.playlist.clone(),
    ));
    (planned, first_playlist)
}

/// Measures every output and registers them all `pending` in the ledger, in one statement.
async fn register(
    pool: &DbPool,
    plan: &AttemptPlan,
    planned: Vec<Planned>,
) -> Result<Vec<Output>, MediaError> {
    let mut all = Vec::with_capacity(planned.len());
    for (axis, sequence, key, path) in planned {
        let size = tokio::fs::metadata(&path)
            .await
            .map_err(|e| {
                MediaError::retryable(
                    crate::domain::failure::FailureCode::IoError,
                    format!("output vanished: {e}"),
                )
            })?
            .len();
        all.push(Output {
            axis,
            sequence,
            key,
            path,
            size: i64::try_from(size).unwrap_or(i64::MAX),
        });
    }
    // The ledger first: a crash from here on leaves `pending` rows that say which objects may
    // be missing or partial. Nothing re-drives them yet: the lease expires and the job's next
    // attempt encodes again and uploads under its own prefix (or, after a graceful release,
    // under this one, re-registering these rows as `pending`).
    let rows: Vec<NewArtifact<'_>> = all
        .iter()
        .map(|o| NewArtifact {
            video_id: plan.video.0,
            run: plan.run,
            attempt: plan.attempt,
            axis: o.axis.as_str(),
            sequence: o.sequence,
            object_key: &o.key,
            size_bytes: o.size,
            part: plan.part_of.map(|(_, part)| part),
        })
        .collect();
    let registered = db::retrying::while_unavailable("registering the outputs", || async {
        let mut conn = pool.get().await?;
        Ok(db::artifacts::register_pending(&mut conn, plan.claim_token, &rows).await?)
    })
    .await;
    match registered {
        Ok(Some(_)) => Ok(all),
        // The claim is gone (reclaimed, cancelled, or lost with a database crash): its
        // objects must not be written, and the finalize would be fenced out anyway.
        Ok(None) => Err(MediaError::retryable(
            crate::domain::failure::FailureCode::ClaimLost,
            "the attempt no longer holds its job; nothing was uploaded",
        )),
        Err(e) => Err(storage_error(e)),
    }
}

/// Puts `objects` ([`UPLOAD_CONCURRENCY`] at a time), then `playlists` one by one: only then
/// can a player follow a playlist to objects that all exist. On the first failure the other
/// transfers are stopped and waited for, never dropped mid-way.
async fn put_in_order(
    storage: &Storage,
    pool: &DbPool,
    objects: &[Output],
    playlists: &[Output],
    outage: &Outage,
    cancel: &CancellationToken,
) -> Result<(), MediaError> {
    let stop = cancel.child_token();
    // Boxed so the stream's item type names no closure lifetime (keeps the future Send).
    let uploads: Vec<futures_util::future::BoxFuture<'_, Result<(), MediaError>>> = objects
        .iter()
        .map(|o| Box::pin(put_and_confirm(storage, pool, o, outage, &stop)) as _)
        .collect();
    let mut uploads = futures_util::stream::iter(uploads).buffer_unordered(UPLOAD_CONCURRENCY);
    let mut first_error = None;
    while let Some(done) = uploads.next().await {
        if let Err(error) = done {
            stop.cancel();
            first_error.get_or_insert(error);
        }
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    for playlist in playlists {
        put_and_confirm(storage, pool, playlist, outage, cancel).await?;
    }
    Ok(())
}

/// PUT, then ask S3 what it holds, then CAS the row with that size: the ledger records what
/// is in the bucket, not what a PUT response claimed.
async fn put_and_confirm(
    storage: &Storage,
    pool: &DbPool,
    output: &Output,
    outage: &Outage,
    cancel: &CancellationToken,
) -> Result<(), MediaError> {
    let stopped = || {
        MediaError::retryable(
            crate::domain::failure::FailureCode::Cancelled,
            "the attempt was stopped during a transfer",
        )
    };
    loop {
        if cancel.is_cancelled() {
            return Err(stopped());
        }
        let put = storage
            .put_file_until(
                &output.key,
                &output.path,
                output.axis.content_type(),
                cancel,
            )
            .await;
        if cancel.is_cancelled() {
            return Err(stopped());
        }
        match put {
            Ok(_) => break,
            Err(error) => {
                outage
                    .wait_out(error, &output.key, "storing an output", cancel)
                    .await?
            }
        }
    }
    super::until_cancelled(cancel, confirm(storage, pool, output, outage, cancel)).await?
}

/// Records in the ledger what S3 holds under the output's key.
async fn confirm(
    storage: &Storage,
    pool: &DbPool,
    output: &Output,
    outage: &Outage,
    cancel: &CancellationToken,
) -> Result<(), MediaError> {
    let head = loop {
        match storage.head(&output.key).await {
            Ok(head) => break head,
            Err(error) => {
                outage
                    .wait_out(error, &output.key, "storing an output", cancel)
                    .await?
            }
        }
    };
    let stored = head.ok_or_else(|| {
        tracing::warn!(key = %output.key, "object missing right after its PUT");
        MediaError::retryable(
            crate::domain::failure::FailureCode::StorageError,
            "an output was missing from storage right after it was stored",
        )
    })?;
    let marked = db::retrying::while_unavailable("recording a stored output", || async {
        let mut conn = pool.get().await?;
        Ok(db::artifacts::mark_uploaded(&mut conn, &output.key, stored.size).await?)
    })
    .await
    .map_err(storage_error)?;
    if marked == 0 {
        tracing::warn!(key = %output.key, stored = stored.size, expected = output.size,
            "the ledger disagrees with storage (other size, or the row is gone)");
        return Err(MediaError::retryable(
            crate::domain::failure::FailureCode::StorageError,
            "a stored output did not match what was recorded for it",
        ));
    }
    Ok(())
}
