//! `vidq reconcile`'s judgement, pure: given what the ledger says (uploads, artifacts,
//! videos and their attempts) and a listing of the bucket, which rows lack their object or
//! have one of another size, and which objects no live row owns (docs/architecture.md,
//! "Upload recovery": recovery is judged on the object at the contracted key with the right
//! size, not on an empty queue).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::upload::UploadState;
use super::video::VideoStatus;

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
    pub recordings: std::collections::HashSet<Uuid>,
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

/// Compares the ledger with the listing. Objects outside `originals/` and `videos/` are not
/// vidq's and are left alone.
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
    let mut check = |key: &str, size: i64, sha256: Option<&str>, owner: Owner, what: String| {
        report.rows += 1;
        match listed.get(key) {
            None => report.differences.push(Difference {
                kind: Kind::Missing,
                key: key.to_owned(),
                reason: format!("{what} has no object; expected {size} bytes"),
                owner,
            }),
            Some(object) if object.size != size => report.differences.push(Difference {
                kind: Kind::SizeMismatch,
                key: key.to_owned(),
                reason: format!("object has {} bytes, {what} declares {size}", object.size),
                owner,
            }),
            Some(object) => {
                // A row with a digest landed only once S3 held its object with that digest:
                // another digest, or none, means the object was written over since.
                let held = match (&object.sha256, sha256) {
                    (StoredDigest::Sha256(held), Some(want)) if held != want => {
                        Some(format!("bytes with SHA-256 {held}"))
                    }
                    (StoredDigest::Absent, Some(_)) => {
                        Some("bytes stored without a SHA-256".into())
                    }
                    _ => None,
                };
                if let (Some(held), Some(want)) = (held, sha256) {
                    report.differences.push(Difference {
                        kind: Kind::DigestMismatch,
                        key: key.to_owned(),
                        reason: format!("object holds {held}, {what} names SHA-256 {want}"),
                        owner,
                    });
                }
            }
        }
    };
    for upload in uploads {
        if matches!(upload.state, UploadState::Uploaded | UploadState::Confirmed) {
            check(
                &upload.key,
                upload.size,
                None,
                Owner::Upload(upload.id),
                format!("upload {} ({})", upload.id, upload.state.as_str()),
            );
        }
    }
    for artifact in artifacts {
        check(
            &artifact.key,
            artifact.size,
            None,
            Owner::Artifact(artifact.video),
            format!("artifact of video {} (uploaded)", artifact.video),
        );
    }

    for file in live.files.iter().filter(|f| f.uploaded) {
        check(
            &file.key,
            file.size,
            file.sha256.as_deref(),
            Owner::Recording(file.recording),
            format!("file of recording {} (uploaded)", file.recording),
        );
    }
    let live_keys: std::collections::HashSet<&str> =
        live.files.iter().map(|f| f.key.as_str()).collect();

    let contracted: std::collections::HashSet<&str> =
        uploads.iter().map(|u| u.key.as_str()).collect();
    let tail_pieces: std::collections::HashSet<&str> = uploads
        .iter()
        .flat_map(|u| u.tail_pieces.iter().map(String::as_str))
        .collect();
    let videos: HashMap<Uuid, &VideoRecord> = videos.iter().map(|v| (v.id, v)).collect();
    let grace = chrono::Duration::seconds(i64::try_from(grace_secs).unwrap_or(i64::MAX));
    let mut orphans = Vec::new();
    for object in objects {
        let reason = if object.key.starts_with("originals/") {
            (!contracted.contains(object.key.as_str())).then(|| "no live upload owns it".to_owned())
        } else if let Some(rest) = object.key.strip_prefix("videos/") {
            video_orphan(rest, &videos)
        } else if object.key.starts_with("tus-tail/") {
            (!tail_pieces.contains(object.key.as_str()))
                .then(|| "no upload still arriving names it as a tail piece".to_owned())
        } else if let Some(rest) = object.key.strip_prefix("live/") {
            let recording = rest
                .split('/')
                .next()
                .and_then(|id| id.parse::<Uuid>().ok());
            match recording {
                Some(id) if !live.recordings.contains(&id) => {
                    Some(format!("recording {id} does not exist"))
                }
                Some(_) if live_keys.contains(object.key.as_str()) => None,
                Some(_) => Some("no file of the recording owns it".to_owned()),
                None => Some("not under a recording's prefix".to_owned()),
            }
        } else {
            None
        };
        let Some(reason) = reason else { continue };
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

/// Why a key under `videos/` (without that prefix) is an orphan, or `None` if a live video
/// owns it: a READY video owns its live attempt's prefix; any other video owns its job's
/// current attempt's prefix (an encode may be writing there).
fn video_orphan(rest: &str, videos: &HashMap<Uuid, &VideoRecord>) -> Option<String> {
    let (id, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(id) = id.parse::<Uuid>() else {
        return Some("not under a video's prefix".to_owned());
    };
    let Some(video) = videos.get(&id) else {
        return Some(format!("video {id} does not exist"));
    };
    if let Some(run) = part_run_of(rest) {
        // A split video's parts: its stitch reads them until the video is READY.
        let current_run = video.current.map(|(run, _)| run);
        return match (video.status, current_run) {
            (VideoStatus::Ready, _) => Some("a part of a video that is ready".to_owned()),
            (_, Some(current)) if current == run => None,
            _ => Some(format!(
                "a part of run r{run}, not the job's current run ({} video)",
                video.status.as_str()
            )),
        };
    }
    let Some(attempt) = attempt_of(rest) else {
        return Some("not under an attempt prefix (videos/{id}/r{run}/a{attempt}/)".to_owned());
    };
    let (run, n) = attempt;
    if video.status == VideoStatus::Ready {
        return match video.live {
            Some(live) if live == attempt => None,
            Some((lr, la)) => Some(format!(
                "attempt r{run}/a{n} is not the live attempt r{lr}/a{la} of a ready video"
            )),
            None => Some("a ready video without a live attempt".to_owned()),
        };
    }
    match video.current {
        Some(current) if current == attempt => None,
        Some((cr, ca)) => Some(format!(
            "attempt r{run}/a{n} is not the job's current attempt r{cr}/a{ca} ({} video)",
            video.status.as_str()
        )),
        None => Some(format!("{} video without a job", video.status.as_str())),
    }
}

/// The run of a part's object, `r{run}/p{part}/a{attempt}/...`.
fn part_run_of(rest: &str) -> Option<i32> {
    let mut parts = rest.splitn(4, '/');
    let run = parts.next()?.strip_prefix('r')?.parse().ok()?;
    parts.next()?.strip_prefix('p')?.parse::<i32>().ok()?;
    parts.next()?.strip_prefix('a')?.parse::<i32>().ok()?;
    parts.next()?;
    Some(run)
}

/// `(run, attempt)` of `r{run}/a{attempt}/...`.
fn attempt_of(rest: &str) -> Option<(i32, i32)> {
    let mut parts = rest.splitn(3, '/');
    let run = parts.next()?.strip_prefix('r')?.parse().ok()?;
    let attempt = parts.next()?.strip_prefix('a')?.parse().ok()?;
    parts.next()?;
    Some((run, attempt))
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

    #[test]
    fn rows_and_objects_are_judged_and_young_orphans_are_left_out() {
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
                state: UploadState::Uploaded,
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
        let objects = [
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
        let report = compare(
            &uploads,
            &artifacts,
            &videos,
            &LiveLedger::default(),
            &objects,
            Utc::now(),
            3600,
        );
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
        let zero = compare(
            &uploads,
            &artifacts,
            &videos,
            &LiveLedger::default(),
            &objects,
            Utc::now(),
            0,
        );
        assert_eq!(zero.count(Kind::Orphan), 7);
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
