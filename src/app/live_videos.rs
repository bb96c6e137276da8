//! A finished live recording becomes a video (docs/live.md, "The video"): once it has
//! ended and its init and every kept segment are in S3, one transaction makes the video, its
//! `repackage` job on the ordinary encoding queue and `video.accepted`, like a confirm does
//! for an upload (invariant I1: none of them exists without the others). A recording that
//! ended with nothing playable fails instead. The node's sweeper runs this after its
//! recording passes; two sweepers racing make one video (the recording is locked and
//! checked inside the transaction).

use diesel_async::{AsyncConnection, AsyncPgConnection};

use crate::db::{self, DbError, DbPool, recordings::videos::WholeRecording};
use crate::domain::event::Event;
use crate::domain::ids::{RecordingId, VideoId};
use crate::domain::job::JobKind;
use crate::domain::recording;

/// What one pass over a node's ended recordings did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    /// Recordings that became videos, with their video.
    pub videos: Vec<(RecordingId, VideoId)>,
    /// Recordings that ended with no init or no segment in S3.
    pub failed: Vec<RecordingId>,
}

/// Makes the videos of `node`'s whole recordings and fails the unplayable ones.
pub async fn settle_ended(pool: &DbPool, node: &str) -> Result<Settled, DbError> {
    let mut conn = pool.get().await?;
    let mut settled = Settled::default();
    for whole in db::recordings::videos::whole(&mut conn, node).await? {
        // One recording's failure must not hold back the others (nor the failed pass).
        match make_video(&mut conn, whole).await {
            Ok(Some(video)) => {
                tracing::info!(recording_id = %whole.id, video_id = %video,
                    "live recording is whole; its video is queued for repackaging");
                settled.videos.push((whole.id, video));
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(recording_id = %whole.id, error = %crate::telemetry::error_chain(&error),
                    "could not make a live recording's video; the next pass tries again");
            }
        }
    }
    settled.failed = db::recordings::videos::fail_unplayable(&mut conn, node).await?;
    for id in &settled.failed {
        tracing::warn!(recording_id = %id,
            "live recording ended without an init or a segment in S3; it cannot become a video");
    }
    Ok(settled)
}

/// One recording's video, job and `video.accepted`, in one transaction in the lock order
/// (the owner, then the recording; the rest are new rows). `None` if it has a video already.
async fn make_video(
    conn: &mut AsyncPgConnection,
    whole: WholeRecording,
) -> Result<Option<VideoId>, DbError> {
    conn.transaction::<_, DbError, _>(async |conn| {
        if db::users::lock_for_key_share(conn, whole.owner_id)
            .await?
            .is_none()
            || !db::recordings::videos::lock_for_video(conn, whole.id).await?
            // Read again after the lock, in a statement of its own (a fresh snapshot): a
            // sweeper that made the video while this one waited for the lock has committed.
            || db::recordings::videos::video_of(conn, whole.id).await?.is_some()
        {
            return Ok(None);
        }
        let video = VideoId::new();
        let row = db::videos::insert_from_recording(conn, video, whole.owner_id, whole.id).await?;
        db::jobs::insert(
            conn,
            video,
            &recording::files_prefix(whole.id),
            JobKind::Repackage,
        )
        .await?;
        let event = Event::video_accepted_from_recording(video, whole.id, row.created_at);
        db::deliveries::outbox::insert(conn, whole.owner_id, &event).await?;
        db::jobs::notify_claimable(conn).await?;
        Ok(Some(video))
    })
    .await
}
