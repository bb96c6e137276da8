//! Putting an attempt's outputs in S3 in playback-safe order (inits and segments, the MP4 and
//! thumbnail, then the renditions' playlists, the top playlist last) with each object registered `pending` first and
//! confirmed by a CAS on state and the size S3 reports.

use std::path::PathBuf;

use futures_util::{StreamExt, TryStreamExt};

use super::PlaybackKeys;
use crate::adapters::ffmpeg::encode::EncodedFiles;
use crate::adapters::storage::Storage;
use crate::db::{self, DbPool, artifacts::NewArtifact};
use crate::domain::artifact::Axis;
use crate::domain::ids::VideoId;
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
        "storage_error",
        "object storage or the database failed while storing the outputs",
    )
}

/// Uploads every output of one attempt; returns the playback keys once all are confirmed.
pub async fn upload(
    storage: &Storage,
    pool: &DbPool,
    video: VideoId,
    attempt: i32,
    files: &EncodedFiles,
) -> Result<PlaybackKeys, MediaError> {
    let key = |name: &str| keys::attempt_object(video, attempt, name);
    // Sequence numbers keep every object of an axis distinct across the ladder's renditions.
    const PER_RENDITION: i32 = 100_000;
    let mut planned: Vec<(Axis, i32, String, PathBuf)> = Vec::new();
    let mut playlists: Vec<(Axis, i32, String, PathBuf)> = Vec::new();
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
    // Rendition playlists after every segment, the top playlist (master or single) last.
    let first_playlist = planned.len();
    planned.extend(playlists);
    planned.push((
        Axis::Playlist,
        0,
        key(outputs::PLAYLIST),
        files.playlist.clone(),
    ));

    let mut all = Vec::with_capacity(planned.len());
    for (axis, sequence, key, path) in planned {
        let size = tokio::fs::metadata(&path)
            .await
            .map_err(|e| MediaError::retryable("io_error", format!("output vanished: {e}")))?
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
    {
        let rows: Vec<NewArtifact<'_>> = all
            .iter()
            .map(|o| NewArtifact {
                video_id: video.0,
                attempt,
                axis: o.axis.as_str(),
                sequence: o.sequence,
                object_key: &o.key,
                size_bytes: o.size,
            })
            .collect();
        let mut conn = pool.get().await.map_err(storage_error)?;
        db::artifacts::register_pending(&mut conn, &rows)
            .await
            .map_err(storage_error)?;
    }

    let (objects, playlists) = all.split_at(first_playlist);
    // Boxed so the stream's item type names no closure lifetime (keeps the future Send).
    let uploads: Vec<futures_util::future::BoxFuture<'_, Result<(), MediaError>>> = objects
        .iter()
        .map(|o| Box::pin(put_and_confirm(storage, pool, o)) as _)
        .collect();
    futures_util::stream::iter(uploads)
        .buffer_unordered(UPLOAD_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    // Only now can a player follow a playlist to objects that all exist; the top one last.
    for playlist in playlists {
        put_and_confirm(storage, pool, playlist).await?;
    }

    Ok(PlaybackKeys {
        hls: key(outputs::PLAYLIST),
        mp4: key(outputs::MP4),
        thumbnail: key(outputs::THUMBNAIL),
    })
}

/// PUT, then ask S3 what it holds, then CAS the row with that size: the ledger records what
/// is in the bucket, not what a PUT response claimed.
async fn put_and_confirm(
    storage: &Storage,
    pool: &DbPool,
    output: &Output,
) -> Result<(), MediaError> {
    storage
        .put_file(&output.key, &output.path, output.axis.content_type())
        .await
        .map_err(storage_error)?;
    let stored = storage
        .head(&output.key)
        .await
        .map_err(storage_error)?
        .ok_or_else(|| {
            tracing::warn!(key = %output.key, "object missing right after its PUT");
            MediaError::retryable(
                "storage_error",
                "an output was missing from storage right after it was stored",
            )
        })?;
    let mut conn = pool.get().await.map_err(storage_error)?;
    if db::artifacts::mark_uploaded(&mut conn, &output.key, stored.size)
        .await
        .map_err(storage_error)?
        == 0
    {
        tracing::warn!(key = %output.key, stored = stored.size, expected = output.size,
            "the ledger disagrees with storage (other size, or the row is gone)");
        return Err(MediaError::retryable(
            "storage_error",
            "a stored output did not match what was recorded for it",
        ));
    }
    Ok(())
}
