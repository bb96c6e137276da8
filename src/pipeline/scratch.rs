//! Attempt scratch directories (`vidq-job-*` under the work root) and the removal of those a
//! killed worker left behind. Each directory is locked (`flock`) by the process using it for
//! as long as it exists; the kernel drops the lock when that process dies, however it dies.
//! So at start a worker removes exactly the directories nobody holds, also when several
//! worker processes (or containers with their own process ids) share one work root.

use std::fs::{File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

/// Name prefix of every attempt's scratch directory.
pub const PREFIX: &str = "vidq-job-";

/// One attempt's scratch directory, locked while this value lives and removed when it is
/// dropped.
#[derive(Debug)]
pub struct Scratch {
    // Field order: the directory is removed before its lock is released, so a cleaner never
    // sees an unlocked directory that is still in use.
    dir: tempfile::TempDir,
    _lock: File,
}

/// Makes `root` if it is missing and proves a scratch directory can be made and written in
/// it (a worker checks at start, so a read-only or missing work root is said once, not once
/// per job).
pub fn check_writable(root: &Path) -> io::Result<()> {
    std::fs::create_dir_all(root)?;
    let scratch = Scratch::create(root)?;
    std::fs::write(scratch.path().join("probe"), b"vidq")?;
    Ok(())
}

impl Scratch {
    /// Creates and locks a new scratch directory under `root`.
    pub fn create(root: &Path) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix(PREFIX).tempdir_in(root)?;
        let lock = File::open(dir.path())?;
        // Blocks only while a starting worker's sweep holds it (a moment); that sweep may
        // have removed the directory in between, which the check below notices.
        lock.lock()?;
        if !dir.path().is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the scratch directory was removed as it was created",
            ));
        }
        Ok(Self { dir, _lock: lock })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Removes the scratch directories under `root` that no live process holds (left by a
/// worker that was killed); returns those removed. Directories in use are left alone.
pub fn remove_stale(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let path = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with(PREFIX);
        if !ours || !entry.file_type()?.is_dir() {
            continue;
        }
        let Ok(lock) = File::open(&path) else {
            continue; // removed meanwhile, or not ours to open
        };
        match lock.try_lock() {
            Ok(()) => {
                // Nobody holds it: its worker is gone. Removed while locked, so a worker
                // creating a directory of the same name cannot be cut off halfway.
                std::fs::remove_dir_all(&path)?;
                removed.push(path);
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(error)) => return Err(error),
        }
    }
    Ok(removed)
}
