//! Object keys in S3. The server chooses every key; a client's filename never becomes part
//! of one, so no client can write outside its own objects or guess another's.

use super::ids::{UploadId, VideoId};

/// Where the client PUTs its original.
pub fn original(upload: UploadId) -> String {
    format!("originals/{upload}")
}

/// Everything vidq writes for one video, all runs and attempts included.
pub fn video_prefix(video: VideoId) -> String {
    format!("videos/{video}/")
}

/// The prefix of one run: an operator retry starts a new run, whose attempts count from 1
/// again, so the run is what keeps its keys apart from the earlier runs' keys.
pub fn run_prefix(video: VideoId, run: i32) -> String {
    format!("videos/{video}/r{run}/")
}

/// The prefix of one encoding attempt of a run. Each attempt writes under its own prefix, so a
/// late (zombie) attempt can never overwrite the outputs of the attempt that won.
pub fn attempt_prefix(video: VideoId, run: i32, attempt: i32) -> String {
    format!("{}a{attempt}/", run_prefix(video, run))
}

/// One output object of an attempt, named by its place under the attempt prefix.
pub fn attempt_object(video: VideoId, run: i32, attempt: i32, name: &str) -> String {
    format!("{}{name}", attempt_prefix(video, run, attempt))
}

/// The prefix of one attempt of one part (a chunk or the audio) of a split video, inside its
/// run: the stitch reads it, and once the video is READY it is removed with the run's other
/// intermediates.
pub fn part_attempt_prefix(video: VideoId, run: i32, part: i32, attempt: i32) -> String {
    format!("{}p{part}/a{attempt}/", run_prefix(video, run))
}

/// Every part of a run (`r{run}/p`, which no attempt's own prefix is under): what a split run
/// that ends any way owes the bucket once its parts are no longer read.
pub fn parts_prefix(video: VideoId, run: i32) -> String {
    format!("{}p", run_prefix(video, run))
}

/// One intermediate object of a part's attempt.
pub fn part_object(video: VideoId, run: i32, part: i32, attempt: i32, name: &str) -> String {
    format!("{}{name}", part_attempt_prefix(video, run, part, attempt))
}

/// Every prefix of a video that a READY of `(run, attempt)` makes dead: the run's earlier
/// attempts, every earlier run and the run's parts (`r{run}/p`, every part and attempt). A
/// first attempt of a first run that was not split leaves nothing behind, so the list is empty
/// and the READY transaction owes the bucket nothing. The live prefix is never among them:
/// `a{attempt}/` is not under `a{k}/` for another `k`, nor under `p`.
pub fn superseded_prefixes(video: VideoId, run: i32, attempt: i32, split: bool) -> Vec<String> {
    if run <= 1 && attempt <= 1 && !split {
        return Vec::new();
    }
    let attempts = (1..attempt).map(|k| attempt_prefix(video, run, k));
    let runs = (1..run).map(|r| run_prefix(video, r));
    attempts
        .chain(runs)
        .chain(std::iter::once(parts_prefix(video, run)))
        .collect()
}

/// Names of the outputs under an attempt prefix.
pub mod outputs {
    /// HLS playlist (uploaded last: it is what makes the others reachable).
    pub const PLAYLIST: &str = "hls/index.m3u8";
    /// fMP4 initialization segment.
    pub const INIT: &str = "hls/init.mp4";
    /// Progressive MP4 with `moov` first.
    pub const MP4: &str = "video.mp4";
    /// Poster frame.
    pub const THUMBNAIL: &str = "thumb.jpg";
    /// A live recording's init and segments joined into one MP4 (repackage attempts only).
    pub const ORIGINAL: &str = "original.mp4";

    /// The n-th media segment.
    pub fn segment(n: u32) -> String {
        format!("hls/seg_{n:05}.m4s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_deterministic_and_nested() {
        let video = VideoId::new();
        let attempt = attempt_prefix(video, 3, 2);
        assert!(attempt.starts_with(&run_prefix(video, 3)));
        assert!(run_prefix(video, 3).starts_with(&video_prefix(video)));
        assert_eq!(attempt, format!("videos/{video}/r3/a2/"));
        // Attempt 1 of run 2 is not attempt 1 of run 1, nor a prefix of run 12's keys.
        assert_ne!(attempt_prefix(video, 2, 1), attempt_prefix(video, 1, 1));
        assert!(!attempt_prefix(video, 12, 1).starts_with(&run_prefix(video, 1)));
        let part = part_attempt_prefix(video, 3, 7, 2);
        assert_eq!(part, format!("videos/{video}/r3/p7/a2/"));
        assert!(part.starts_with(&run_prefix(video, 3)));
        assert!(!part.starts_with(&attempt_prefix(video, 3, 2)));
        let upload = UploadId::new();
        assert_eq!(original(upload), format!("originals/{upload}"));
    }

    #[test]
    fn superseded_prefixes_cover_every_dead_attempt_and_never_the_live_one() {
        let video = VideoId::new();
        assert!(superseded_prefixes(video, 1, 1, false).is_empty());
        let dead = superseded_prefixes(video, 2, 3, false);
        let live = attempt_prefix(video, 2, 3);
        for key in [
            attempt_object(video, 2, 1, outputs::MP4),
            attempt_object(video, 2, 2, outputs::PLAYLIST),
            attempt_object(video, 1, 3, outputs::MP4),
            part_object(video, 2, 4, 1, outputs::INIT),
        ] {
            assert!(dead.iter().any(|p| key.starts_with(p)), "{key} not owed");
        }
        for key in [
            attempt_object(video, 2, 3, outputs::MP4),
            attempt_object(video, 2, 3, &outputs::segment(1)),
        ] {
            assert!(key.starts_with(&live));
            assert!(!dead.iter().any(|p| key.starts_with(p)), "{key} owed");
        }
        // A split first attempt still owes its parts.
        let split = superseded_prefixes(video, 1, 1, true);
        assert_eq!(split, vec![format!("videos/{video}/r1/p")]);
    }
}
