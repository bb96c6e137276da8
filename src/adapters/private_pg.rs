//! A private PostgreSQL server for `vidq dev` on a machine with the server installed and
//! none running: its cluster lives under the dev data directory (`<dir>/pg`), it listens on
//! a free loopback port (no Unix socket), trusts local connections, and is stopped when
//! `vidq dev` exits. PostgreSQL refuses to run as root, so as root the cluster is owned by
//! and run as the `postgres` system user (else `nobody`); when that user cannot enter the
//! data directory (a project under `/root`), the cluster lives under `/var/tmp` instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the private server could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PrivatePgError {
    /// No `initdb`/`pg_ctl` on the PATH or under `/usr/lib/postgresql/*/bin`.
    #[error(
        "no PostgreSQL server is installed (initdb and pg_ctl were looked for on the PATH and in /usr/lib/postgresql/*/bin): install it (Debian/Ubuntu: apt-get install postgresql) or set DATABASE_URL"
    )]
    NotInstalled,
    /// A tool ran and failed; its log says why.
    #[error("{tool} failed ({status}); see {log}")]
    Failed {
        /// `initdb` or `pg_ctl`.
        tool: &'static str,
        /// Its exit status.
        status: String,
        /// Where its output went.
        log: String,
    },
    /// The disk or a process could not be used.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PrivatePgError {
    let what = what.into();
    move |source| PrivatePgError::Io { what, source }
}

/// A running private server.
#[derive(Debug)]
pub struct PrivatePostgres {
    data: PathBuf,
    pg_ctl: PathBuf,
    owner: Option<(u32, u32)>,
    /// The server's options (its port, loopback only, no socket), to start it again.
    options: String,
    /// `postgres://postgres@127.0.0.1:{port}/vidq`.
    pub url: String,
}

impl PrivatePostgres {
    /// Initializes `<dir>` on first use and starts the server on a free port.
    pub async fn start(dir: &Path) -> Result<Self, PrivatePgError> {
        let (initdb, pg_ctl) = find_tools().ok_or(PrivatePgError::NotInstalled)?;
        let owner = if is_root() {
            Some(system_user().ok_or_else(|| PrivatePgError::Io {
                what: "running as root, and there is no postgres or nobody user to run PostgreSQL as"
                    .into(),
                source: std::io::Error::other("no such user"),
            })?)
        } else {
            None
        };
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let asked =
            std::fs::canonicalize(dir).map_err(io(format!("resolving {}", dir.display())))?;
        let log = asked.with_file_name("pg.log");
        let data = cluster_dir(asked, owner)?;
        if !data.join("PG_VERSION").exists() {
            initdb_at(&initdb, &data, owner, &log).await?;
        }
        let mut server = Self {
            data,
            pg_ctl,
            owner,
            options: String::new(),
            url: String::new(),
        };
        // A server a killed `vidq dev` left running holds the cluster: stop it first.
        let _ = server.ctl(&["stop", "-m", "fast", "-w"], &log).await;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io("finding a free port"))?
            .port();
        let options =
            format!("-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''");
        server.options = options.clone();
        // Inside the cluster's directory: the server's user can write there.
        let data_log = server.data.join("server.log");
        server
            .ctl(
                &[
                    "start",
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    &data_log.to_string_lossy(),
                    "-o",
                    &options,
                ],
                &log,
            )
            .await?;
        tracing::info!(port, dir = %server.data.display(), "private PostgreSQL started");
        Ok(Self {
            url: format!("postgres://postgres@127.0.0.1:{port}/vidq"),
            ..server
        })
    }

    /// Stops the server (fast shutdown: sessions are ended, nothing is lost).
    pub async fn stop(self) {
        let log = self.data.with_file_name("pg.log");
        match self.ctl(&["stop", "-m", "fast", "-w"], &log).await {
            Ok(()) => tracing::info!("private PostgreSQL stopped"),
            Err(error) => tracing::warn!(%error, "could not stop the private PostgreSQL"),
        }
    }

    /// Where the cluster lives (`<dir>` as asked, or under `/var/tmp` when the server's user
    /// could not reach that).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// Restarts the server on the same port, as an operator's `pg_ctl restart -m fast` (a
    /// minor upgrade, a failover) does: every session is ended, the server is down for a
    /// moment, and comes back with nothing lost. Returns once it accepts connections again.
    pub async fn restart(&self) -> Result<(), PrivatePgError> {
        let log = self.data.with_file_name("pg.log");
        // `restart` keeps the options the server was started with (its postmaster.opts);
        // the server's own log is not among them.
        let data_log = self.data.join("server.log");
        self.ctl(
            &[
                "restart",
                "-m",
                "fast",
                "-w",
                "-t",
                "60",
                "-l",
                &data_log.to_string_lossy(),
            ],
            &log,
        )
        .await
    }

    /// Stops the server (fast shutdown), leaves it down for `down`, and starts it again on
    /// the same port: an outage as long as a slow restart or a failover. Returns once it
    /// accepts connections again.
    pub async fn restart_after(&self, down: std::time::Duration) -> Result<(), PrivatePgError> {
        let log = self.data.with_file_name("pg.log");
        self.ctl(&["stop", "-m", "fast", "-w"], &log).await?;
        tokio::time::sleep(down).await;
        let data_log = self.data.join("server.log");
        let data_log = data_log.to_string_lossy();
        let start = [
            "start",
            "-w",
            "-t",
            "60",
            "-l",
            &data_log,
            "-o",
            &self.options,
        ];
        self.ctl(&start, &log).await
    }

    /// Leaves the server running past this handle and stops it once process `pid` has
    /// exited: a detached watcher polls the pid every second, then runs `pg_ctl stop`. For a
    /// caller that has no place to stop it, such as a test binary, whose statics are never
    /// dropped.
    pub fn stop_after_process(self, pid: u32) -> std::io::Result<()> {
        let mut stop: Vec<String> = Vec::new();
        if let Some((uid, gid)) = self.owner {
            stop.extend([
                "setpriv".to_owned(),
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".to_owned(),
                "--".to_owned(),
            ]);
        }
        stop.extend([
            self.pg_ctl.to_string_lossy().into_owned(),
            "-D".to_owned(),
            self.data.to_string_lossy().into_owned(),
            "stop".to_owned(),
            "-m".to_owned(),
            "fast".to_owned(),
        ]);
        use std::os::unix::process::CommandExt;
        // Its own process group: a Ctrl-C of the caller must not take the watcher with it.
        std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done; exec "$@""#)
            .process_group(0)
            .arg(pid.to_string())
            .args(stop)
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(drop)
    }

    async fn ctl(&self, args: &[&str], log: &Path) -> Result<(), PrivatePgError> {
        let mut all = vec!["-D".to_owned(), self.data.to_string_lossy().into_owned()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        run("pg_ctl", &self.pg_ctl, &all, self.owner, log).await
    }
}

/// Runs `tool` (as `owner` when given, through `setpriv`), its output appended to `log`.
/// Where the cluster lives: `asked`, or when the server runs as another user who cannot
/// enter it, a directory that user can reach; handed to that user.
fn cluster_dir(asked: PathBuf, owner: Option<(u32, u32)>) -> Result<PathBuf, PrivatePgError> {
    let mut data = asked;
    if let Some((uid, gid)) = owner
        && !reachable_by(&data, uid, gid)
    {
        // A project under a directory only root may enter (`/root`, mode 700): the
        // server's user could not reach a cluster there. It goes where that user can.
        let elsewhere = reachable_home(&data);
        tracing::info!(
            wanted = %data.display(),
            dir = %elsewhere.display(),
            "the PostgreSQL user cannot enter the dev data directory (a directory above it is closed to other users); its private cluster lives here instead"
        );
        std::fs::create_dir_all(&elsewhere)
            .map_err(io(format!("creating {}", elsewhere.display())))?;
        data = elsewhere;
    }
    if let Some((uid, gid)) = owner {
        chown_tree(&data, uid, gid).map_err(io(format!(
            "handing {} to the server's user",
            data.display()
        )))?;
    }
    Ok(data)
}

/// A new cluster in `data`: superuser `postgres`, trusted on loopback, UTF-8.
async fn initdb_at(
    initdb: &Path,
    data: &Path,
    owner: Option<(u32, u32)>,
    log: &Path,
) -> Result<(), PrivatePgError> {
    let args: Vec<String> = [
        "-D",
        &data.to_string_lossy(),
        "-U",
        "postgres",
        "-A",
        "trust",
        "-E",
        "UTF8",
        "--no-locale",
    ]
    .map(str::to_owned)
    .to_vec();
    run("initdb", initdb, &args, owner, log).await?;
    tracing::info!(dir = %data.display(), "created a private PostgreSQL cluster");
    Ok(())
}

async fn run(
    name: &'static str,
    tool: &Path,
    args: &[String],
    owner: Option<(u32, u32)>,
    log: &Path,
) -> Result<(), PrivatePgError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io(format!("opening {}", log.display())))?;
    let err = out.try_clone().map_err(io("opening the log"))?;
    let mut command = match owner {
        Some((uid, gid)) => {
            let mut c = tokio::process::Command::new("setpriv");
            c.args([
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".to_owned(),
                "--".to_owned(),
            ])
            .arg(tool);
            c
        }
        None => tokio::process::Command::new(tool),
    };
    command
        .args(args)
        // The server's cwd must be reachable by its user.
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true);
    let child = command.spawn().map_err(io(format!("running {name}")))?;
    let status = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .map_err(|_| PrivatePgError::Io {
            what: format!("{name} did not finish within 120 s"),
            source: std::io::Error::from(std::io::ErrorKind::TimedOut),
        })?
        .map_err(io(format!("waiting for {name}")))?
        .status;
    if status.success() {
        Ok(())
    } else {
        Err(PrivatePgError::Failed {
            tool: name,
            status: status.to_string(),
            log: log.display().to_string(),
        })
    }
}

/// `initdb` and `pg_ctl` from the PATH, else from the newest `/usr/lib/postgresql/*/bin`.
fn find_tools() -> Option<(PathBuf, PathBuf)> {
    find_tools_in(
        std::env::var_os("PATH").as_deref(),
        Path::new("/usr/lib/postgresql"),
    )
}

/// [`find_tools`] over a given PATH value and package root.
fn find_tools_in(path: Option<&std::ffi::OsStr>, packages: &Path) -> Option<(PathBuf, PathBuf)> {
    let on_path = |name: &str| {
        path.and_then(|path| {
            std::env::split_paths(path)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
    };
    if let (Some(initdb), Some(pg_ctl)) = (on_path("initdb"), on_path("pg_ctl")) {
        return Some((initdb, pg_ctl));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(packages)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    versions.sort();
    let (_, bin) = versions.pop()?;
    Some((bin.join("initdb"), bin.join("pg_ctl")))
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Whether the user `uid` (group `gid`) may pass through every directory from `/` down to
/// `path` (the execute bit that applies to them: owner, group, or others).
fn reachable_by(path: &Path, uid: u32, gid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    path.ancestors().all(|dir| {
        let Ok(meta) = std::fs::metadata(dir) else {
            return false;
        };
        let mode = meta.mode();
        if meta.uid() == uid {
            mode & 0o100 != 0
        } else if meta.gid() == gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        }
    })
}

/// Where the private cluster of the dev data directory `data` lives when the server's user
/// cannot reach `data`: under `/var/tmp` (kept across reboots, open to every user), in a
/// directory named after `data`, so each project keeps its own.
fn reachable_home(data: &Path) -> PathBuf {
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(data.as_os_str().as_encoded_bytes()));
    Path::new("/var/tmp")
        .join("vidq-dev-postgres")
        .join(&digest[..16])
}

/// The uid and gid of `postgres`, else `nobody`, from `/etc/passwd`.
fn system_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    let find = |name: &str| {
        passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.first() == Some(&name) && fields.len() > 3)
                .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
                .flatten()
        })
    };
    find("postgres").or_else(|| find("nobody"))
}

fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() && !path.is_symlink() {
            chown_tree(&path, uid, gid)?;
        } else {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(dir: &Path, name: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(name), "").unwrap();
    }

    #[test]
    fn the_tools_come_from_the_path_else_the_newest_package_and_their_absence_says_what_to_install()
    {
        let root = tempfile::tempdir().unwrap();
        let packages = root.path().join("postgresql");
        let empty = root.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert_eq!(find_tools_in(Some(empty.as_os_str()), &packages), None);
        let message = PrivatePgError::NotInstalled.to_string();
        assert!(message.contains("apt-get install postgresql") && message.contains("DATABASE_URL"));
        for version in ["13", "16", "9"] {
            let bin = packages.join(version).join("bin");
            tool(&bin, "initdb");
            tool(&bin, "pg_ctl");
        }
        let (initdb, _) = find_tools_in(Some(empty.as_os_str()), &packages).unwrap();
        assert_eq!(initdb, packages.join("16/bin/initdb"));
        let on_path = root.path().join("path");
        tool(&on_path, "initdb");
        tool(&on_path, "pg_ctl");
        let (initdb, pg_ctl) = find_tools_in(Some(on_path.as_os_str()), &packages).unwrap();
        assert_eq!(
            (initdb, pg_ctl),
            (on_path.join("initdb"), on_path.join("pg_ctl"))
        );
    }
}
