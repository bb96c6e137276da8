//! What the ledger still owns in the bucket, prefix by prefix: whether a listed object is
//! an orphan, and why.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::{LiveLedger, UploadRecord, VideoRecord};
use crate::domain::video::VideoStatus;

/// What the ledger still owns in the bucket, prefix by prefix.
pub(super) struct Owned<'a> {
    /// Originals: the key of every upload the snapshot holds.
    contracted: HashSet<&'a str>,
    /// Tail pieces an upload still arriving names.
    tail_pieces: HashSet<&'a str>,
    videos: HashMap<Uuid, &'a VideoRecord>,
    recordings: &'a HashSet<Uuid>,
    /// Recording files that own their key.
    live_keys: HashSet<&'a str>,
}

impl<'a> Owned<'a> {
    pub(super) fn of(
        uploads: &'a [UploadRecord],
        videos: &'a [VideoRecord],
        live: &'a LiveLedger,
    ) -> Self {
        Self {
            contracted: uploads.iter().map(|u| u.key.as_str()).collect(),
            tail_pieces: uploads
                .iter()
                .flat_map(|u| u.tail_pieces.iter().map(String::as_str))
                .collect(),
            videos: videos.iter().map(|v| (v.id, v)).collect(),
            recordings: &live.recordings,
            live_keys: live.files.iter().map(|f| f.key.as_str()).collect(),
        }
    }

    /// Why `key` is an orphan, or `None` if the ledger owns it or it is not vidq's.
    pub(super) fn orphan_reason(&self, key: &str) -> Option<String> {
        if key.starts_with("originals/") {
            (!self.contracted.contains(key)).then(|| "no live upload owns it".to_owned())
        } else if let Some(rest) = key.strip_prefix("videos/") {
            video_orphan(rest, &self.videos)
        } else if key.starts_with("tus-tail/") {
            (!self.tail_pieces.contains(key))
                .then(|| "no upload still arriving names it as a tail piece".to_owned())
        } else if let Some(rest) = key.strip_prefix("live/") {
            let recording = rest
                .split('/')
                .next()
                .and_then(|id| id.parse::<Uuid>().ok());
            match recording {
                Some(id) if !self.recordings.contains(&id) => {
                    Some(format!("recording {id} does not exist"))
                }
                Some(_) if self.live_keys.contains(key) => None,
                Some(_) => Some("no file of the recording owns it".to_owned()),
                None => Some("not under a recording's prefix".to_owned()),
            }
        } else {
            None
        }
    }
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
        // A split video's parts: its stitch reads them until the video is READY; a video
        // that failed (or was cancelled) has no stitch to come.
        let current_run = video.current.map(|(run, _)| run);
        return match (video.status, current_run) {
            (VideoStatus::Ready, _) => Some("a part of a video that is ready".to_owned()),
            (VideoStatus::Failed, _) => Some("a part of a video that failed".to_owned()),
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
