//! A worker's copies of the originals it read last. Each part of a split video needs the whole
//! original, so a worker that planned the video, or takes several of its parts, keeps the
//! original it read rather than reading it from S3 again for every chunk. The bytes behind an
//! original's key never change (docs/design.md, I10), so a copy is good for as long as it
//! exists. Copies are hard links under `vidq-originals/` in the work root: handing one to an
//! attempt copies nothing, and an attempt's scratch directory going away leaves it. At most
//! [`KEPT`] are kept, no more than `VIDQ_ORIGINALS_CACHE_MB` together, none unused for
//! [`MAX_IDLE`] (a video's parts run together; a copy nobody asked for since is dead weight),
//! the least recently used going first. A copy is a saving, never a dependency: any failure
//! here is logged and the attempt reads from S3 instead.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// The directory under the work root (no attempt's scratch name starts like it, so the sweep
/// of stale scratch directories at start leaves it alone).
pub const DIR: &str = "vidq-originals";

/// Copies kept: one per slot of a small worker, and one more.
const KEPT: usize = 3;

/// A copy unused for this long goes.
pub const MAX_IDLE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The copies under one work root.
#[derive(Debug)]
pub struct Originals {
    dir: PathBuf,
    /// The most the copies may take together, in bytes.
    cap_bytes: u64,
}

impl Originals {
    /// The copies of the worker whose work root is `work_root`, at most `cap_bytes` together.
    pub fn new(work_root: &Path, cap_bytes: u64) -> Self {
        Self {
            dir: work_root.join(DIR),
            cap_bytes,
        }
    }

    /// Where the copy of `key` would be: named by the key's SHA-256, as keys hold `/`.
    fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(hex::encode(Sha256::digest(key.as_bytes())))
    }

    /// Links the kept copy of `key` to `to` (in an attempt's scratch directory); whether
    /// there was one.
    pub fn take(&self, key: &str, to: &Path) -> bool {
        let kept = self.path_of(key);
        if std::fs::hard_link(&kept, to).is_err() {
            return false;
        }
        // Used now: the last to be evicted.
        // (Setting a time needs a handle opened for writing; nothing is written.)
        if let Ok(file) = std::fs::File::options().write(true).open(&kept) {
            let _ = file.set_modified(SystemTime::now());
        }
        if let Err(error) = self.evict() {
            tracing::debug!(%error, "could not evict old copies of originals");
        }
        true
    }

    /// Keeps `from`, a complete copy of `key`, for this worker's next attempts on it.
    pub fn keep(&self, key: &str, from: &Path) {
        let kept = self.path_of(key);
        let too_big = std::fs::metadata(from).map_or(true, |m| m.len() > self.cap_bytes);
        if kept.exists() || too_big {
            return;
        }
        // Linked under a temporary name and renamed: another slot never sees half a name.
        let temporary = self.dir.join(format!(
            ".{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        let linked = std::fs::create_dir_all(&self.dir)
            .and_then(|()| std::fs::hard_link(from, &temporary))
            .and_then(|()| std::fs::rename(&temporary, &kept));
        if let Err(error) = linked {
            let _ = std::fs::remove_file(&temporary);
            tracing::debug!(%error, "could not keep a copy of the original");
            return;
        }
        if let Err(error) = self.evict() {
            tracing::debug!(%error, "could not evict old copies of originals");
        }
    }

    /// Keeps the most recently used copies while they are at most [`KEPT`], at most
    /// `cap_bytes` together and used within [`MAX_IDLE`]; removes the rest.
    fn evict(&self) -> std::io::Result<()> {
        let mut copies: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let meta = entry.metadata()?;
            copies.push((meta.modified()?, meta.len(), entry.path()));
        }
        copies.sort_by_key(|c| std::cmp::Reverse(c.0));
        let now = SystemTime::now();
        let (mut count, mut bytes) = (0, 0u64);
        for (used, size, path) in copies {
            let idle = now.duration_since(used).unwrap_or_default();
            if count < KEPT && bytes + size <= self.cap_bytes && idle <= MAX_IDLE {
                count += 1;
                bytes += size;
            } else {
                std::fs::remove_file(path)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_original_is_handed_out_again_and_the_oldest_copies_go() {
        let root = tempfile::tempdir().unwrap();
        let originals = Originals::new(root.path(), u64::MAX);
        let scratch = tempfile::tempdir().unwrap();
        let downloaded = scratch.path().join("original");
        std::fs::write(&downloaded, b"the bytes").unwrap();
        assert!(!originals.take("originals/a", &scratch.path().join("none")));
        originals.keep("originals/a", &downloaded);
        drop(scratch); // the attempt's scratch directory goes; the copy stays
        let next = tempfile::tempdir().unwrap();
        let handed = next.path().join("original");
        assert!(originals.take("originals/a", &handed));
        assert_eq!(std::fs::read(&handed).unwrap(), b"the bytes");
        for n in 0..KEPT + 2 {
            let file = next.path().join(format!("o{n}"));
            std::fs::write(&file, n.to_string()).unwrap();
            // Times a clear step apart, whatever the file system's resolution (a copy is a
            // hard link: it shares the file's time).
            let at = SystemTime::now() + std::time::Duration::from_secs(10 * (n as u64 + 1));
            std::fs::File::options()
                .write(true)
                .open(&file)
                .unwrap()
                .set_modified(at)
                .unwrap();
            originals.keep(&format!("originals/{n}"), &file);
        }
        originals.evict().unwrap();
        let left = std::fs::read_dir(root.path().join(DIR)).unwrap().count();
        assert_eq!(left, KEPT);
        assert!(
            !originals.path_of("originals/a").exists(),
            "least recently used first"
        );
        assert!(
            originals
                .path_of(&format!("originals/{}", KEPT + 1))
                .exists()
        );
    }

    /// A file of `bytes` bytes last used `ago` before now.
    fn used(dir: &Path, name: &str, bytes: usize, ago: std::time::Duration) -> PathBuf {
        let file = dir.join(name);
        std::fs::write(&file, vec![0u8; bytes]).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(SystemTime::now() - ago)
            .unwrap();
        file
    }

    #[test]
    fn copies_stay_within_their_byte_cap_and_go_once_idle() {
        let root = tempfile::tempdir().unwrap();
        let originals = Originals::new(root.path(), 250);
        let files = tempfile::tempdir().unwrap();
        let minute = std::time::Duration::from_secs(60);
        let too_big = used(files.path(), "big", 300, minute);
        originals.keep("originals/big", &too_big);
        assert!(
            !originals.path_of("originals/big").exists(),
            "over the cap alone"
        );
        let idle = used(files.path(), "idle", 10, MAX_IDLE + minute);
        originals.keep("originals/idle", &idle);
        assert!(
            !originals.path_of("originals/idle").exists(),
            "unused for longer than MAX_IDLE"
        );
        let older = used(files.path(), "older", 100, 3 * minute);
        originals.keep("originals/older", &older);
        let newer = used(files.path(), "newer", 200, minute);
        originals.keep("originals/newer", &newer);
        // 100 + 200 bytes is over 250: the least recently used goes.
        assert!(originals.path_of("originals/newer").exists());
        assert!(!originals.path_of("originals/older").exists());
    }
}
