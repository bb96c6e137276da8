//! The ledger against the bucket: turns a ledger snapshot and a listing into the report
//! `vidq reconcile` prints and the sweeper's orphan pass acts on (`domain::reconcile`).

use chrono::{DateTime, Utc};

use crate::db::DbError;
use crate::db::reconcile::LedgerSnapshot;
use crate::domain::reconcile::{
    ArtifactRecord, BucketObject, LiveFileRecord, LiveLedger, Report, UploadRecord, VideoRecord,
    compare,
};

/// Where vidq writes: what the comparison lists.
pub const PREFIXES: [&str; 4] = ["originals/", "videos/", "live/", "tus-tail/"];

impl From<crate::adapters::storage::ListedObject> for BucketObject {
    fn from(o: crate::adapters::storage::ListedObject) -> Self {
        Self {
            key: o.key,
            size: o.size,
            last_modified: o.last_modified,
            // A listing carries no metadata; `vidq reconcile` reads it where it compares.
            sha256: crate::domain::reconcile::StoredDigest::Unread,
        }
    }
}

/// Compares a snapshot read BEFORE the listing (a row that claims its object was written
/// after its PUT, so the later listing holds it; an object written after the read is young
/// enough for the grace period).
pub fn compare_snapshot(
    snapshot: &LedgerSnapshot,
    objects: &[BucketObject],
    now: DateTime<Utc>,
    grace_secs: u64,
) -> Result<Report, DbError> {
    let uploads = snapshot
        .uploads
        .iter()
        .map(|u| {
            Ok(UploadRecord {
                id: u.id,
                key: u.object_key.clone(),
                size: u.declared_size,
                state: u.state,
                tail_pieces: snapshot
                    .tail_pieces
                    .iter()
                    .filter(|p| p.upload_id == u.id)
                    .map(|p| p.object_key.clone())
                    .collect(),
            })
        })
        .collect::<Result<Vec<_>, crate::domain::upload::UnknownState>>()?;
    let artifacts: Vec<_> = snapshot
        .artifacts
        .iter()
        .map(|a| ArtifactRecord {
            video: a.video_id,
            key: a.object_key.clone(),
            size: a.size_bytes,
        })
        .collect();
    let videos = snapshot
        .videos
        .iter()
        .map(|v| {
            Ok(VideoRecord {
                id: v.id,
                status: v.status,
                live: v.live_run.zip(v.live_attempt),
                current: v.job_run.zip(v.job_attempt),
            })
        })
        .collect::<Result<Vec<_>, crate::domain::upload::UnknownState>>()?;
    let live = LiveLedger {
        recordings: snapshot.recordings.iter().copied().collect(),
        files: snapshot
            .recording_files
            .iter()
            .map(|f| LiveFileRecord {
                recording: f.recording_id,
                key: f.object_key.clone(),
                size: f.size_bytes,
                sha256: f.content_sha256.clone(),
                uploaded: f.state == crate::domain::recording::FileState::Uploaded,
            })
            .collect(),
    };
    Ok(compare(
        &uploads, &artifacts, &videos, &live, objects, now, grace_secs,
    ))
}
