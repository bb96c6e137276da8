//! The spool's file boundary: turns a ledger row's relative spool path into a file under
//! `VIDQ_SPOOL_DIR`, or refuses it before anything is read. A path that is absolute, holds
//! `..`, or resolves (through a symlink anywhere along it) outside the root is refused as
//! `outside_spool_root`; a path that resolves to nothing is `spool_missing`.

use std::path::{Path, PathBuf};

use crate::domain::sweep::relative_spool_path;
use crate::domain::upload::RejectReason;

/// The allowed root, resolved once (symlinks in the root itself are the operator's choice).
#[derive(Clone, Debug)]
pub struct SpoolRoot {
    root: PathBuf,
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
        Ok(Self { root })
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
