//! The spool's file boundary: turns a ledger row's relative spool path into a file under
//! `VIDQ_SPOOL_DIR`, or refuses it before anything is read. A path that is absolute, holds
//! `..`, or resolves (through a symlink anywhere along it) outside the root is refused as
//! `outside_spool_root`; a path that resolves to nothing is `spool_missing`.
//!
//! Bytes a client sends through vidq are written here too ([`SpoolRoot::create`],
//! [`SpoolRoot::append`]): streamed to the file from a blocking thread through a small
//! bounded channel (constant memory whatever the upload's size), hashed on the way when the
//! client gave a checksum, and fsynced before the caller records the new length in the
//! ledger, so the ledger never counts a byte the disk could still lose.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::writer_share::{ShareFull, ShareLimits, Writer, WriterShares};
use crate::domain::sweep::relative_spool_path;
use crate::domain::tus::{Checksum, ChecksumHasher};
use crate::domain::upload::RejectReason;

/// Chunks in flight between the request and the writer thread: with a 1 MiB write buffer
/// behind them, an upload holds a few MiB at most, whatever its size.
const CHANNEL_CHUNKS: usize = 16;
/// Writes are gathered into this much before they reach the file.
const WRITE_BUFFER: usize = 1 << 20;

/// The allowed root, resolved once (symlinks in the root itself are the operator's choice).
#[derive(Clone, Debug)]
pub struct SpoolRoot {
    root: PathBuf,
    /// Spool writers at once, on the node and per user and recording. Each holds a blocking
    /// thread for as long as its request sends (minutes on a slow phone); past a share,
    /// requests are turned away (503, `Retry-After`) rather than left waiting for a thread
    /// while others starve.
    writers: WriterShares,
}

/// Why the root is unusable.
#[derive(Debug, thiserror::Error)]
#[error("the spool directory {path:?} cannot be used")]
pub struct SpoolRootError {
    /// The configured path.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// What checking a row's spool file found.
#[derive(Debug)]
pub enum SpoolCheck {
    /// A regular file under the root (the resolved path, without symlinks) and its size.
    File {
        /// The resolved path.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
    },
    /// Refused for good.
    Refused(RejectReason),
    /// The disk could not answer (permissions, I/O): try again later.
    Unreadable(std::io::Error),
}

impl SpoolRoot {
    /// Creates the directory if missing and resolves it.
    pub fn open(path: &Path) -> Result<Self, SpoolRootError> {
        let err = |source| SpoolRootError {
            path: path.to_owned(),
            source,
        };
        std::fs::create_dir_all(path).map_err(err)?;
        let root = std::fs::canonicalize(path).map_err(err)?;
        // The directory uploads are spooled in exists, durably, before any row names a
        // file in it: a power loss cannot take the directory and its files with it.
        std::fs::create_dir_all(root.join(UPLOADS_DIR)).map_err(err)?;
        std::fs::File::open(&root)
            .and_then(|dir| dir.sync_all())
            .map_err(err)?;
        Ok(Self {
            root,
            writers: WriterShares::new(ShareLimits::default()),
        })
    }

    /// The resolved root.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Checks `raw` (as the row holds it) at the file boundary. Nothing outside the root is
    /// opened: the lexical check comes first, then the path is resolved (which follows
    /// symlinks without reading files) and must stay under the root before its metadata is
    /// read. The resolved path is what gets PUT, so a symlink swapped in afterwards is not
    /// followed.
    pub fn check(&self, raw: Option<&str>) -> SpoolCheck {
        let relative = match raw.map(relative_spool_path) {
            Some(Ok(relative)) => relative,
            Some(Err(reason)) => return SpoolCheck::Refused(reason),
            None => return SpoolCheck::Refused(RejectReason::SpoolMissing),
        };
        let resolved = match std::fs::canonicalize(self.root.join(relative)) {
            Ok(resolved) => resolved,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                // A dangling symlink pointing outside is still outside; say which.
                return match std::fs::read_link(self.root.join(relative)) {
                    Ok(target)
                        if !self.root.join(relative).parent().is_some_and(|p| {
                            p.join(&target).starts_with(&self.root) && !target.is_absolute()
                        }) =>
                    {
                        SpoolCheck::Refused(RejectReason::OutsideSpoolRoot)
                    }
                    _ => SpoolCheck::Refused(RejectReason::SpoolMissing),
                };
            }
            Err(err) => return SpoolCheck::Unreadable(err),
        };
        if !resolved.starts_with(&self.root) || resolved == self.root {
            return SpoolCheck::Refused(RejectReason::OutsideSpoolRoot);
        }
        match std::fs::metadata(&resolved) {
            Ok(meta) if meta.is_file() => SpoolCheck::File {
                path: resolved,
                size: meta.len(),
            },
            Ok(_) => SpoolCheck::Refused(RejectReason::SpoolMissing),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                SpoolCheck::Refused(RejectReason::SpoolMissing)
            }
            Err(err) => SpoolCheck::Unreadable(err),
        }
    }
}

/// The directory under the root that holds uploads through vidq.
pub const UPLOADS_DIR: &str = "uploads";

/// How an append ended, as the caller saw its request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendEnd {
    /// The body arrived whole: keep it if the checksum (if any) matches.
    Complete,
    /// The body stopped early (the connection dropped, another request took the upload
    /// over): keep what arrived, unless a checksum was promised for the whole chunk.
    Interrupted,
    /// Throw this chunk away (it ran past the upload's length).
    Discard,
}

/// What an append left on disk (fsynced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Bytes kept after the starting offset.
    pub kept: u64,
    /// The chunk was whole but its digest was not the client's: nothing was kept.
    pub checksum_mismatch: bool,
}

/// Why an append could not run.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The file is gone or shorter than the ledger's offset: its bytes were lost.
    #[error("the spool file is missing or shorter than the {offset} bytes the ledger holds")]
    Lost {
        /// The ledger's offset.
        offset: u64,
    },
    /// The path is not a file under the root.
    #[error("the spool path is refused: {0}")]
    Refused(RejectReason),
    /// A share of the node's writer slots (the node's, the user's, the recording's) is full.
    #[error(transparent)]
    Busy(#[from] ShareFull),
    /// Another request (of this process or another one sharing the spool) holds the file.
    #[error("another request holds the spool file")]
    Held,
    /// The disk failed.
    #[error("writing the spool file failed")]
    Io(#[from] std::io::Error),
}

enum Message {
    Data(Bytes),
    End(AppendEnd),
}

/// A spool file one request holds exclusively (an `flock`, so also against other processes
/// sharing the spool), from before it reads the ledger's count until after it records the
/// new one: nobody can cut or extend the file in between. Dropping it lets go.
#[derive(Debug)]
pub struct HeldSpoolFile {
    file: std::fs::File,
}

/// How long [`SpoolRoot::hold`] waits for a writer that is finishing (its request went away
/// and it is saving what arrived) before it answers [`AppendError::Held`].
const HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// A running append: feed it the body's chunks, then [`SpoolAppend::finish`].
pub struct SpoolAppend {
    tx: mpsc::Sender<Message>,
    writer: tokio::task::JoinHandle<Result<(Appended, HeldSpoolFile), AppendError>>,
}

impl SpoolAppend {
    /// Hands one chunk to the writer (waits while the channel is full: backpressure on the
    /// client). An error means the writer stopped; [`SpoolAppend::finish`] says why.
    pub async fn write(&mut self, data: Bytes) -> Result<(), ()> {
        self.tx.send(Message::Data(data)).await.map_err(|_| ())
    }

    /// Ends the append and waits until what is kept is on disk; the file comes back still
    /// held, for the caller to keep until the ledger counts what was kept.
    pub async fn finish(self, end: AppendEnd) -> Result<(Appended, HeldSpoolFile), AppendError> {
        // A writer that already stopped has its own answer.
        let _ = self.tx.send(Message::End(end)).await;
        drop(self.tx);
        self.writer
            .await
            .map_err(|e| AppendError::Io(std::io::Error::other(e)))?
    }
}

impl SpoolRoot {
    /// The path a relative spool path names, checked lexically (it must stay under the
    /// root) without touching the disk.
    fn join(&self, relative: &str) -> Result<PathBuf, AppendError> {
        let relative = relative_spool_path(relative).map_err(AppendError::Refused)?;
        Ok(self.root.join(relative))
    }

    /// Creates an empty spool file (and its directory), both fsynced, so the ledger row that
    /// names it never points at a file a crash could undo. An existing file is emptied.
    pub async fn create(&self, relative: &str) -> Result<(), AppendError> {
        let path = self.join(relative)?;
        tokio::task::spawn_blocking(move || -> Result<(), AppendError> {
            create_durably(&path, true)?.sync_all()?;
            Ok(())
        })
        .await
        .map_err(|e| AppendError::Io(std::io::Error::other(e)))?
    }

    /// Moves a spool file to another name under the root (replacing what is there), the
    /// destination directory created and fsynced, so the new name survives a crash.
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), AppendError> {
        let (from, to) = (self.join(from)?, self.join(to)?);
        tokio::task::spawn_blocking(move || -> Result<(), AppendError> {
            let dir = to.parent().expect("a spool path has a directory");
            std::fs::create_dir_all(dir)?;
            std::fs::rename(&from, &to)?;
            std::fs::File::open(dir)?.sync_all()?;
            Ok(())
        })
        .await
        .map_err(|e| AppendError::Io(std::io::Error::other(e)))?
    }

    /// Removes a spool file (gone already is fine).
    pub async fn remove(&self, relative: &str) -> Result<(), AppendError> {
        let path = self.join(relative)?;
        match tokio::fs::remove_file(path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// Removes the directory holding `relative` if it is empty (it holds something, is gone
    /// already, or cannot be named: left as it is).
    pub async fn remove_empty_dir_of(&self, relative: &str) {
        let Ok(path) = self.join(relative) else {
            return;
        };
        if let Some(dir) = path.parent() {
            let _ = tokio::fs::remove_dir(dir).await;
        }
    }

    /// Takes the spool file for one request (see [`HeldSpoolFile`]), waiting a moment for
    /// a writer that is finishing. A missing file is [`AppendError::Lost`].
    pub async fn hold(&self, relative: &str) -> Result<HeldSpoolFile, AppendError> {
        self.hold_or_start(relative, false).await
    }

    /// [`SpoolRoot::hold`]; with `start` (nothing is counted yet), a missing file is the
    /// upload's first byte arriving: the file is made then (its directory fsynced, so the
    /// name survives a crash), not when the upload was created, so uploads created and
    /// never sent cost the disk nothing.
    pub async fn hold_or_start(
        &self,
        relative: &str,
        start: bool,
    ) -> Result<HeldSpoolFile, AppendError> {
        let path = self.join(relative)?;
        let deadline = tokio::time::Instant::now() + HOLD_WAIT;
        loop {
            let path = path.clone();
            let tried = tokio::task::spawn_blocking(move || {
                let file = match std::fs::OpenOptions::new().write(true).open(&path) {
                    Err(e) if start && e.kind() == std::io::ErrorKind::NotFound => {
                        create_durably(&path, false)?
                    }
                    opened => opened?,
                };
                match file.try_lock() {
                    Ok(()) => Ok(Some(file)),
                    Err(std::fs::TryLockError::WouldBlock) => Ok(None),
                    Err(std::fs::TryLockError::Error(e)) => Err(e),
                }
            })
            .await
            .map_err(|e| AppendError::Io(std::io::Error::other(e)))?;
            match tried {
                Ok(Some(file)) => return Ok(HeldSpoolFile { file }),
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Ok(None) => return Err(AppendError::Held),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(AppendError::Lost { offset: 0 });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Starts appending to a held file at `offset` (the ledger's count of bytes kept):
    /// whatever lies past it (the tail of a write a crash interrupted before the ledger
    /// counted it) is cut first. `expected` is the client's digest of exactly this chunk;
    /// `writer` says whose share of the writer slots it takes.
    pub fn append(
        &self,
        held: HeldSpoolFile,
        offset: u64,
        expected: Option<Checksum>,
        writer: Writer,
    ) -> Result<SpoolAppend, AppendError> {
        let permit = self.writers.take(writer)?;
        let (tx, mut rx) = mpsc::channel::<Message>(CHANNEL_CHUNKS);
        let writer = tokio::task::spawn_blocking(move || -> Result<_, AppendError> {
            let _permit = permit;
            let file = held.file;
            if file.metadata()?.len() < offset {
                return Err(AppendError::Lost { offset });
            }
            file.set_len(offset)?;
            let mut out = std::io::BufWriter::with_capacity(WRITE_BUFFER, file);
            out.seek(SeekFrom::Start(offset))?;
            let mut hasher = expected.as_ref().map(|c| ChecksumHasher::new(c.algorithm));
            let mut written = 0u64;
            let end = loop {
                match rx.blocking_recv() {
                    Some(Message::Data(data)) => {
                        if let Err(error) = out.write_all(&data) {
                            // A full disk (or a failing one): what this request wrote is
                            // given back, so its space is free again and the file ends at
                            // the bytes the ledger counts.
                            let file = out.into_parts().0;
                            let _ = file.set_len(offset);
                            return Err(error.into());
                        }
                        if let Some(h) = hasher.as_mut() {
                            h.update(&data);
                        }
                        written += data.len() as u64;
                    }
                    Some(Message::End(end)) => break end,
                    // The request went away without a word: what arrived may be kept.
                    None => break AppendEnd::Interrupted,
                }
            };
            let file = match out.into_inner() {
                Ok(file) => file,
                Err(failed) => {
                    let (error, out) = failed.into_parts();
                    let _ = out.into_parts().0.set_len(offset);
                    return Err(error.into());
                }
            };
            let had_checksum = expected.is_some();
            let checksum_mismatch = end == AppendEnd::Complete
                && expected
                    .zip(hasher)
                    .is_some_and(|(want, h)| h.finish() != want.digest);
            // A chunk whose checksum could not be checked (cut short) or did not match is
            // not kept; neither is a discarded one.
            let keep = match end {
                AppendEnd::Complete => !checksum_mismatch,
                AppendEnd::Interrupted => !had_checksum,
                AppendEnd::Discard => false,
            };
            if !keep {
                file.set_len(offset)?;
            }
            if let Err(error) = file.sync_data() {
                let _ = file.set_len(offset);
                return Err(error.into());
            }
            let appended = Appended {
                kept: if keep { written } else { 0 },
                checksum_mismatch,
            };
            Ok((appended, HeldSpoolFile { file }))
        });
        Ok(SpoolAppend { tx, writer })
    }
}

/// Opens `path` for writing, made with its directory if missing (emptied with `truncate`),
/// and fsyncs the directory, so the file's name survives a crash.
fn create_durably(path: &Path, truncate: bool) -> std::io::Result<std::fs::File> {
    let dir = path.parent().expect("a spool path has a directory");
    std::fs::create_dir_all(dir)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(truncate)
        .open(path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_that_resolve_under_the_root_pass() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"x").unwrap();
        let root = SpoolRoot::open(&dir.path().join("spool")).unwrap();
        std::fs::create_dir(root.path().join("a")).unwrap();
        std::fs::write(root.path().join("a/ok.bin"), b"hello").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("out")).unwrap();
        std::os::unix::fs::symlink("ok.bin", root.path().join("a/in")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("gone"), root.path().join("dangling"))
            .unwrap();

        assert!(matches!(
            root.check(Some("a/ok.bin")),
            SpoolCheck::File { size: 5, .. }
        ));
        assert!(matches!(
            root.check(Some("a/in")),
            SpoolCheck::File { size: 5, .. }
        ));
        for bad in ["out", "dangling", "/etc/passwd", "../spool/a/ok.bin", "a"] {
            let found = root.check(Some(bad));
            let expected = if bad == "a" {
                RejectReason::SpoolMissing
            } else {
                RejectReason::OutsideSpoolRoot
            };
            assert!(
                matches!(found, SpoolCheck::Refused(r) if r == expected),
                "{bad}: {found:?}"
            );
        }
        assert!(matches!(
            root.check(Some("a/missing.bin")),
            SpoolCheck::Refused(RejectReason::SpoolMissing)
        ));
        assert!(matches!(
            root.check(None),
            SpoolCheck::Refused(RejectReason::SpoolMissing)
        ));
    }
}
