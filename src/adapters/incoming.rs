//! A process's own directory for live files still arriving: `live/incoming/<process>/` under
//! the spool root. A file is written there whole and renamed into its recording; a request
//! that ends otherwise removes its file. What no request can remove is a file whose process
//! died mid-request (SIGKILL, a power loss): nothing would ever name it again. So each
//! process holds an exclusive lock on `owner.lock` in its directory for as long as it runs
//! (the kernel lets go when the process dies, however it dies), and at start every process
//! removes the directories whose lock it can take: their owners are gone. Several API
//! processes may share one spool; none touches a living one's files.
//!
//! A directory is made under a dot name, locked, then renamed into place, so no process
//! ever sees a directory that is not yet locked.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::spool::SpoolRoot;

/// Under the spool root.
const INCOMING: &str = "live/incoming";
/// In each process's directory; locked while its process runs.
const OWNER_LOCK: &str = "owner.lock";
/// A directory still being set up (a dot name) or a loose file from a build that kept
/// incoming files at the top (`live/incoming/<uuid>.part`) is left this long: its process may
/// still be alive, and no request outlives the ingest listener's body-rate limit this long.
const LOOSE_GRACE: Duration = Duration::from_secs(10 * 60);

/// This process's incoming directory, locked for as long as the value lives.
#[derive(Debug)]
pub struct IncomingDir {
    /// Relative to the spool root.
    relative: String,
    /// Held locked; dropped (and so unlocked) with the process.
    _owner: File,
}

/// What the sweep at start removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Directories of processes that are gone.
    pub directories: usize,
    /// Files that were in them, or loose.
    pub files: usize,
}

impl IncomingDir {
    /// Makes and locks this process's directory, then removes what processes that died
    /// left behind. Blocking: called once at start.
    pub fn claim(spool: &SpoolRoot) -> io::Result<(Self, Swept)> {
        let parent = spool.path().join(INCOMING);
        std::fs::create_dir_all(&parent)?;
        let name = uuid::Uuid::now_v7().to_string();
        let staging = parent.join(format!(".{name}"));
        std::fs::create_dir(&staging)?;
        let owner = File::create(staging.join(OWNER_LOCK))?;
        owner.try_lock().map_err(|error| match error {
            std::fs::TryLockError::Error(e) => e,
            std::fs::TryLockError::WouldBlock => {
                io::Error::other("a fresh incoming directory's lock is held by someone else")
            }
        })?;
        std::fs::rename(&staging, parent.join(&name))?;
        File::open(&parent)?.sync_all()?;
        let swept = sweep(&parent, &name);
        Ok((
            Self {
                relative: format!("{INCOMING}/{name}"),
                _owner: owner,
            },
            swept,
        ))
    }

    /// A new file name in this directory, relative to the spool root.
    pub fn new_file(&self) -> String {
        format!("{}/{}.part", self.relative, uuid::Uuid::now_v7())
    }

    /// The directory, relative to the spool root.
    pub fn relative(&self) -> &str {
        &self.relative
    }
}

/// Removes the directories under `parent` whose owner is gone (their lock is free, or they
/// have none), and old loose entries; keeps `own`. Anything it cannot remove is logged and
/// left: the next start tries again.
fn sweep(parent: &Path, own: &str) -> Swept {
    let mut swept = Swept::default();
    let entries = match std::fs::read_dir(parent) {
        Ok(entries) => entries,
        Err(error) => {
            tracing::warn!(%error, dir = %parent.display(), "could not list the incoming directory");
            return swept;
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name == own {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let outcome = if kind.is_dir() && !name.starts_with('.') {
            match owner_gone(&path) {
                Ok(true) => remove_dir(&path, &mut swept),
                Ok(false) => Ok(()),
                Err(error) => Err(error),
            }
        } else if older_than(&path, LOOSE_GRACE) {
            if kind.is_dir() {
                remove_dir(&path, &mut swept)
            } else {
                std::fs::remove_file(&path).map(|()| swept.files += 1)
            }
        } else {
            Ok(())
        };
        if let Err(error) = outcome
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(%error, path = %path.display(), "could not remove what a stopped process left in the incoming directory");
        }
    }
    swept
}

/// Whether the process that made `dir` is gone: its lock can be taken (and is let go at
/// once), or it has no lock file at all.
fn owner_gone(dir: &Path) -> io::Result<bool> {
    let lock = match File::options().write(true).open(dir.join(OWNER_LOCK)) {
        Ok(lock) => lock,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(error) => return Err(error),
    };
    match lock.try_lock() {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(error)) => Err(error),
    }
}

/// Removes a dead process's directory, counting the files it held (the lock file aside).
fn remove_dir(dir: &PathBuf, swept: &mut Swept) -> io::Result<()> {
    let files = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.file_name() != OWNER_LOCK)
        .count();
    std::fs::remove_dir_all(dir)?;
    swept.directories += 1;
    swept.files += files;
    Ok(())
}

/// Last modified longer ago than `age` (unreadable times count as old).
fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .map(|modified| {
            SystemTime::now()
                .duration_since(modified)
                .is_ok_and(|d| d > age)
        })
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool() -> (tempfile::TempDir, SpoolRoot) {
        let dir = tempfile::tempdir().unwrap();
        let root = SpoolRoot::open(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn a_living_process_keeps_its_files_and_a_dead_ones_directory_goes() {
        let (_dir, root) = spool();
        let (first, swept) = IncomingDir::claim(&root).unwrap();
        assert_eq!(swept, Swept::default());
        let part = root.path().join(first.new_file());
        std::fs::write(&part, b"half a segment").unwrap();

        // Another process starting while the first runs leaves its file alone.
        let (second, swept) = IncomingDir::claim(&root).unwrap();
        assert_eq!(swept, Swept::default());
        assert!(part.exists());

        // The first one dies (its lock goes with it): the next start removes its directory.
        drop(first);
        let (_third, swept) = IncomingDir::claim(&root).unwrap();
        assert_eq!(
            swept,
            Swept {
                directories: 1,
                files: 1
            }
        );
        assert!(!part.exists());
        assert!(root.path().join(second.relative()).exists());
    }

    #[test]
    fn a_directory_without_a_lock_file_is_a_dead_ones_and_fresh_loose_files_stay() {
        let (_dir, root) = spool();
        let parent = root.path().join(INCOMING);
        std::fs::create_dir_all(parent.join("unlocked")).unwrap();
        std::fs::write(parent.join("unlocked/x.part"), b"x").unwrap();
        std::fs::write(parent.join("loose.part"), b"x").unwrap();
        let (_own, swept) = IncomingDir::claim(&root).unwrap();
        assert_eq!(
            swept,
            Swept {
                directories: 1,
                files: 1
            }
        );
        assert!(
            parent.join("loose.part").exists(),
            "a loose file may still be an older build's request in flight"
        );
    }
}
