//! `vidq reconcile`'s judgement, pure: given what the ledger says (uploads, artifacts,
//! videos and their attempts) and a listing of the bucket, which rows lack their object or
//! have one of another size, and which objects no live row owns (docs/architecture.md,
//! "Upload recovery": recovery is judged on the object at the contracted key with the right
//! size, not on an empty queue).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::upload::UploadState;
use super::video::VideoStatus;

mod owned;

use owned::Owned;

/// An upload contract that owns its key.
#[derive(Debug, Clone)]
pub struct UploadRecord {
    /// The contract.
    pub id: Uuid,
    /// Its key.
    pub key: String,
    /// Declared size.
    pub size: i64,
    /// Its state: `uploaded` and `confirmed` claim the object is there; the others only
    /// reserve the key.
    pub state: UploadState,
    /// The keys of its tail pieces (an `s3`-store upload still arriving), which it owns.
    pub tail_pieces: Vec<String>,
}

/// An artifact the ledger says is `uploaded`.
#[derive(Debug, Clone)]
pub struct ArtifactRecord {
    /// Owning video.
    pub video: Uuid,
    /// Its key.
    pub key: String,
    /// Registered size.
    pub size: i64,
}

/// A video with the attempts that may own keys under its prefix.
#[derive(Debug, Clone)]
pub struct VideoRecord {
    /// The video.
    pub id: Uuid,
    /// Its status.
    pub status: VideoStatus,
    /// `(run, attempt)` that made it READY.
    pub live: Option<(i32, i32)>,
    /// Its job's current `(run, attempt)`.
    pub current: Option<(i32, i32)>,
}

/// One object of the listing.
#[derive(Debug, Clone)]
pub struct BucketObject {
    /// Key.
    pub key: String,
    /// Size.
    pub size: i64,
    /// Last written.
    pub last_modified: DateTime<Utc>,
    /// The SHA-256 vidq stored it with, where it was read (a listing carries none).
    pub sha256: StoredDigest,
}

/// What an object's metadata says of its bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StoredDigest {
    /// Not read (a listing carries no metadata): no verdict.
    #[default]
    Unread,
    /// Read: the object carries no digest (vidq did not write it with one).
    Absent,
    /// Read: the SHA-256 (hex) it was stored with.
    Sha256(String),
}

/// What kind of difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A row says its object is in S3; it is not.
    Missing,
    /// The object is there with another size than the row's.
    SizeMismatch,
    /// The object is there with the row's size but other bytes (its stored SHA-256 is not
    /// the row's).
    DigestMismatch,
    /// An object no live row owns, older than the grace period.
    Orphan,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 4] = [
        Kind::Missing,
        Kind::SizeMismatch,
        Kind::DigestMismatch,
        Kind::Orphan,
    ];

    /// How the report spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Missing => "missing",
            Kind::SizeMismatch => "size_mismatch",
            Kind::DigestMismatch => "digest_mismatch",
            Kind::Orphan => "orphan",
        }
    }
}

/// What the ledger says of live recordings.
#[derive(Debug, Clone, Default)]
pub struct LiveLedger {
    /// Recordings that exist.
    pub recordings: HashSet<Uuid>,
    /// Their files that own a key: `pending` (a PUT may be in flight) or `uploaded`.
    pub files: Vec<LiveFileRecord>,
}

/// A recording file that owns its key.
#[derive(Debug, Clone)]
pub struct LiveFileRecord {
    /// Its recording.
    pub recording: Uuid,
    /// Its key.
    pub key: String,
    /// The ledger's size.
    pub size: i64,
    /// The ledger's SHA-256 of its bytes (`None` for rows from before digests).
    pub sha256: Option<String>,
    /// S3 is said to hold it (checked); otherwise it only owns its key.
    pub uploaded: bool,
}

/// Which row a difference is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// An upload contract.
    Upload(Uuid),
    /// An artifact of this video.
    Artifact(Uuid),
    /// A file of this live recording.
    Recording(Uuid),
    /// No row: an orphan.
    Nobody,
}

/// One difference between the ledger and the bucket.
#[derive(Debug, Clone)]
pub struct Difference {
    /// Its kind.
    pub kind: Kind,
    /// The key.
    pub key: String,
    /// Why, in words.
    pub reason: String,
    /// The row concerned.
    pub owner: Owner,
}

/// The comparison.
#[derive(Debug, Default)]
pub struct Report {
    /// Every difference, missing and mismatched rows first, then orphans, by key.
    pub differences: Vec<Difference>,
    /// Objects no row owns but younger than the grace period (uploads or encodes that may
    /// be in flight): not differences.
    pub young: usize,
    /// Objects listed.
    pub objects: usize,
    /// Rows that claim an object (uploads `uploaded|confirmed`, `uploaded` artifacts).
    pub rows: usize,
}

impl Report {
    /// How many differences of this kind.
    pub fn count(&self, kind: Kind) -> usize {
        self.differences.iter().filter(|d| d.kind == kind).count()
    }
}

/// Compares the ledger with the listing. Objects outside `originals/`, `videos/`, `live/` and
/// `tus-tail/` are not vidq's and are left alone.
pub fn compare(
    uploads: &[UploadRecord],
    artifacts: &[ArtifactRecord],
    videos: &[VideoRecord],
    live: &LiveLedger,
    objects: &[BucketObject],
    now: DateTime<Utc>,
    grace_secs: u64,
) -> Report {
    let listed: HashMap<&str, &BucketObject> =
        objects.iter().map(|o| (o.key.as_str(), o)).collect();
    let mut report = Report {
        objects: objects.len(),
        ..Report::default()
    };
    for row in expected_objects(uploads, artifacts, live) {
        report.rows += 1;
        report.differences.extend(judge(&listed, row));
    }
    let owned = Owned::of(uploads, videos, live);
    let grace = chrono::Duration::seconds(i64::try_from(grace_secs).unwrap_or(i64::MAX));
    let mut orphans = Vec::new();
    for object in objects {
        let Some(reason) = owned.orphan_reason(&object.key) else {
            continue;
        };
        // `checked_sub` fails only for absurd graces: then nothing is old enough.
        let old = now
            .checked_sub_signed(grace)
            .is_some_and(|limit| object.last_modified <= limit);
        if old {
            orphans.push(Difference {
                kind: Kind::Orphan,
                key: object.key.clone(),
                reason,
                owner: Owner::Nobody,
            });
        } else {
            report.young += 1;
        }
    }
    report
        .differences
        .sort_by(|a, b| (a.kind, &a.key).cmp(&(b.kind, &b.key)));
    orphans.sort_by(|a, b| a.key.cmp(&b.key));
    report.differences.extend(orphans);
    report
}

/// What one ledger row says the bucket holds.
struct ExpectedObject<'a> {
    key: &'a str,
    size: i64,
    /// The digest S3 must hold, when the row has one.
    sha256: Option<&'a str>,
    owner: Owner,
    /// The row, as the report names it.
    what: String,
}

/// Every ledger row that says S3 holds its object: uploads confirmed (or landed), artifacts
/// and recording files uploaded.
fn expected_objects<'a>(
    uploads: &'a [UploadRecord],
    artifacts: &'a [ArtifactRecord],
    live: &'a LiveLedger,
) -> Vec<ExpectedObject<'a>> {
    let uploads = uploads
        .iter()
        .filter(|u| u.state == UploadState::Confirmed)
        .map(|upload| ExpectedObject {
            key: &upload.key,
            size: upload.size,
            sha256: None,
            owner: Owner::Upload(upload.id),
            what: format!("upload {} ({})", upload.id, upload.state.as_str()),
        });
    let artifacts = artifacts.iter().map(|artifact| ExpectedObject {
        key: &artifact.key,
        size: artifact.size,
        sha256: None,
        owner: Owner::Artifact(artifact.video),
        what: format!("artifact of video {} (uploaded)", artifact.video),
    });
    let files = live
        .files
        .iter()
        .filter(|f| f.uploaded)
        .map(|file| ExpectedObject {
            key: &file.key,
            size: file.size,
            sha256: file.sha256.as_deref(),
            owner: Owner::Recording(file.recording),
            what: format!("file of recording {} (uploaded)", file.recording),
        });
    uploads.chain(artifacts).chain(files).collect()
}

/// How the listing differs from what `row` says, if it does: no object, another size, or
/// (for a row with a digest) other bytes.
fn judge(listed: &HashMap<&str, &BucketObject>, row: ExpectedObject<'_>) -> Option<Difference> {
    let ExpectedObject {
        key,
        size,
        sha256,
        owner,
        what,
    } = row;
    let difference = |kind, reason| {
        Some(Difference {
            kind,
            key: key.to_owned(),
            reason,
            owner,
        })
    };
    let Some(object) = listed.get(key) else {
        return difference(
            Kind::Missing,
            format!("{what} has no object; expected {size} bytes"),
        );
    };
    if object.size != size {
        return difference(
            Kind::SizeMismatch,
            format!("object has {} bytes, {what} declares {size}", object.size),
        );
    }
    // A row with a digest landed only once S3 held its object with that digest: another
    // digest, or none, means the object was written over since.
    let want = sha256?;
    let held = match &object.sha256 {
        StoredDigest::Sha256(held) if held != want => format!("bytes with SHA-256 {held}"),
        StoredDigest::Absent => "bytes stored without a SHA-256".into(),
        _ => return None,
    };
    difference(
        Kind::DigestMismatch,
        format!("object holds {held}, {what} names SHA-256 {want}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(key: &str, size: i64, age_secs: i64) -> BucketObject {
        BucketObject {
            key: key.to_owned(),
            size,
            last_modified: Utc::now() - chrono::Duration::seconds(age_secs),
            sha256: StoredDigest::Unread,
        }
    }

    /// A ledger and a listing with one of each case: (ids: ready, queued, gone, up).
    struct Fixture {
        ids: [Uuid; 4],
        uploads: [UploadRecord; 3],
        artifacts: [ArtifactRecord; 1],
        videos: [VideoRecord; 2],
        objects: Vec<BucketObject>,
    }

    fn fixture() -> Fixture {
        let ready = Uuid::now_v7();
        let queued = Uuid::now_v7();
        let gone = Uuid::now_v7();
        let up = Uuid::now_v7();
        let uploads = [
            UploadRecord {
                id: up,
                key: format!("originals/{up}"),
                size: 10,
                state: UploadState::Confirmed,
                tail_pieces: vec![],
            },
            UploadRecord {
                id: Uuid::now_v7(),
                key: "originals/p".into(),
                size: 5,
                state: UploadState::Pending,
                tail_pieces: vec![],
            },
            UploadRecord {
                id: Uuid::now_v7(),
                key: "originals/m".into(),
                size: 5,
                state: UploadState::Confirmed,
                tail_pieces: vec![],
            },
        ];
        let artifacts = [ArtifactRecord {
            video: ready,
            key: format!("videos/{ready}/r1/a2/thumb.jpg"),
            size: 7,
        }];
        let videos = [
            VideoRecord {
                id: ready,
                status: VideoStatus::Ready,
                live: Some((1, 2)),
                current: Some((1, 2)),
            },
            VideoRecord {
                id: queued,
                status: VideoStatus::Processing,
                live: None,
                current: Some((2, 1)),
            },
        ];
        let objects = vec![
            object(&format!("originals/{up}"), 11, 9999),
            object("originals/p", 5, 9999),
            object("originals/stray", 5, 9999),
            object("originals/young", 5, 10),
            object(&format!("videos/{ready}/r1/a2/thumb.jpg"), 7, 9999),
            object(&format!("videos/{ready}/r1/a1/thumb.jpg"), 7, 9999),
            object(&format!("videos/{queued}/r2/a1/hls/init.mp4"), 7, 9999),
            object(&format!("videos/{queued}/r1/a3/hls/init.mp4"), 7, 9999),
            object(&format!("videos/{gone}/r1/a1/video.mp4"), 7, 9999),
            // A split video's parts: its current run's are the stitch's to read.
            object(&format!("videos/{queued}/r2/p3/a1/v0.ts"), 7, 9999),
            object(&format!("videos/{queued}/r1/p3/a1/v0.ts"), 7, 9999),
            object(&format!("videos/{ready}/r1/p0/a2/v0.ts"), 7, 9999),
            object("elsewhere/file", 1, 9999),
        ];
        Fixture {
            ids: [ready, queued, gone, up],
            uploads,
            artifacts,
            videos,
            objects,
        }
    }

    #[test]
    fn rows_and_objects_are_judged_and_young_orphans_are_left_out() {
        let Fixture {
            ids: [ready, queued, gone, up],
            uploads,
            artifacts,
            videos,
            objects,
        } = fixture();
        let live = LiveLedger::default();
        let judged = |grace| {
            compare(
                &uploads,
                &artifacts,
                &videos,
                &live,
                &objects,
                Utc::now(),
                grace,
            )
        };
        let report = judged(3600);
        let got: Vec<(Kind, String)> = report
            .differences
            .iter()
            .map(|d| (d.kind, d.key.clone()))
            .collect();
        let mut orphans = vec![
            "originals/stray".to_owned(),
            format!("videos/{queued}/r1/a3/hls/init.mp4"),
            format!("videos/{ready}/r1/a1/thumb.jpg"),
            format!("videos/{gone}/r1/a1/video.mp4"),
            format!("videos/{queued}/r1/p3/a1/v0.ts"),
            format!("videos/{ready}/r1/p0/a2/v0.ts"),
        ];
        orphans.sort();
        let mut want = vec![
            (Kind::Missing, "originals/m".to_owned()),
            (Kind::SizeMismatch, format!("originals/{up}")),
        ];
        want.extend(orphans.into_iter().map(|k| (Kind::Orphan, k)));
        assert_eq!(got, want);
        assert_eq!(report.young, 1);
        assert_eq!(report.rows, 3);
        let zero = judged(0);
        assert_eq!(zero.count(Kind::Orphan), 7);
    }

    #[test]
    fn a_failed_videos_parts_are_orphans_of_its_current_run_too() {
        let (failed, running) = (Uuid::now_v7(), Uuid::now_v7());
        let record = |id, status| VideoRecord {
            id,
            status,
            live: None,
            current: Some((1, 2)),
        };
        let videos = [
            record(failed, VideoStatus::Failed),
            record(running, VideoStatus::Processing),
        ];
        let objects = [
            object(&format!("videos/{failed}/r1/p0/a1/v0.ts"), 7, 9999),
            object(&format!("videos/{running}/r1/p0/a1/v0.ts"), 7, 9999),
        ];
        let live = LiveLedger::default();
        let report = compare(&[], &[], &videos, &live, &objects, Utc::now(), 0);
        let orphans: Vec<&str> = report.differences.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(
            orphans,
            [objects[0].key.as_str()],
            "no stitch comes for a failed video; a running one's stitch reads its parts"
        );
    }

    #[test]
    fn a_recording_file_whose_object_holds_other_bytes_of_its_size_is_a_digest_mismatch() {
        let recording = Uuid::now_v7();
        let file = |name: &str, sha: char| LiveFileRecord {
            recording,
            key: format!("live/{recording}/{name}"),
            size: 10,
            sha256: Some(sha.to_string().repeat(64)),
            uploaded: true,
        };
        let live = LiveLedger {
            recordings: [recording].into(),
            files: vec![file("a", 'a'), file("b", 'b'), file("c", 'c')],
        };
        let held = |name: &str, sha256: StoredDigest| BucketObject {
            sha256,
            ..object(&format!("live/{recording}/{name}"), 10, 600)
        };
        let sha = |c: char| StoredDigest::Sha256(c.to_string().repeat(64));
        let objects = [
            held("a", sha('a')),
            held("b", sha('e')),
            held("c", StoredDigest::Absent),
            // Only listed: no verdict on its bytes.
            held("d", StoredDigest::Unread),
        ];
        let mut live = live;
        live.files.push(file("d", 'd'));
        let report = compare(&[], &[], &[], &live, &objects, Utc::now(), 60);
        let mismatched: Vec<&str> = report
            .differences
            .iter()
            .inspect(|d| assert_eq!(d.owner, Owner::Recording(recording)))
            .filter(|d| d.kind == Kind::DigestMismatch)
            .map(|d| d.key.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(mismatched, ["b", "c"], "{:?}", report.differences);
        assert_eq!(report.differences.len(), 2);
    }
}
