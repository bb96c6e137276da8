//! A worker's copies of the originals it read last. Each part of a split video needs the whole
//! original, so a worker that planned the video, or takes several of its parts, keeps the
//! original it read rather than reading it from S3 again for every chunk. The bytes behind an
//! original's key never change (docs/design.md, I10), so a copy is good for as long as it
//! exists. Copies are hard links under `vidq-originals/` in the work root: handing one to an
//! attempt copies nothing, and an attempt's scratch directory going away leaves it. At most
//! [`KEPT`] are kept, the least recently used going first. A copy is a saving, never a
//! dependency: any failure here is logged and the attempt reads from S3 instead.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// The directory under the work root (no attempt's scratch name starts like it, so the sweep
/// of stale scratch directories at start leaves it alone).
pub const DIR: &str = "vidq-originals";

/// Copies kept: one per slot of a small worker, and one more.
const KEPT: usize = 3;

/// The copies under one work root.
#[derive(Debug)]
pub struct Originals {
    dir: PathBuf,
}

impl Originals {
    /// The copies of the worker whose work root is `work_root`.
    pub fn new(work_root: &Path) -> Self {
        Self {
            dir: work_root.join(DIR),
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
        true
    }

    /// Keeps `from`, a complete copy of `key`, for this worker's next attempts on it.
    pub fn keep(&self, key: &str, from: &Path) {
        let kept = self.path_of(key);
        if kept.exists() {
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

    /// Removes all but the [`KEPT`] most recently used copies.
    fn evict(&self) -> std::io::Result<()> {
        let mut copies: Vec<(SystemTime, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let used = entry.metadata()?.modified()?;
            copies.push((used, entry.path()));
        }
        copies.sort_by_key(|c| std::cmp::Reverse(c.0));
        for (_, path) in copies.into_iter().skip(KEPT) {
            std::fs::remove_file(path)?;
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
        let originals = Originals::new(root.path());
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
}
