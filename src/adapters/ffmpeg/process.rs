//! Running one tool as a child process: no stdin, stdout collected, the tail of stderr kept
//! for the error, a wall-clock timeout, and SIGKILL on timeout, cancellation or drop, and on
//! this process's death (a parent-death signal through `setpriv`). Also a long-running child
//! fed through its stdin (an RTMP stream's FFmpeg), tied to this process the same way.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio_util::sync::CancellationToken;

/// How much of stderr is kept (the end is where the reason is).
const STDERR_TAIL: usize = 4096;
/// Largest stdout read (ffprobe's JSON is a few KB).
const STDOUT_LIMIT: u64 = 1 << 20;

/// Why a child did not finish successfully.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The binary is not installed or not on PATH.
    #[error("{program} not found: install FFmpeg (e.g. `apt-get install ffmpeg`) or set its path")]
    NotFound {
        /// The program name.
        program: String,
    },
    /// It could not be started for another reason.
    #[error("cannot start {program}")]
    Spawn {
        /// The program name.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It ran past its time limit and was killed.
    #[error("{program} ran longer than {limit:?} and was killed")]
    TimedOut {
        /// The program name.
        program: String,
        /// The limit.
        limit: Duration,
    },
    /// The caller gave up (claim lost, shutdown) and it was killed.
    #[error("{program} was stopped")]
    Cancelled {
        /// The program name.
        program: String,
    },
    /// It exited unsuccessfully.
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        /// The program name.
        program: String,
        /// Its exit status.
        status: ExitStatus,
        /// The end of its stderr.
        stderr: String,
    },
}

/// Runs `program args`, waits at most `limit`, returns stdout.
pub async fn run(
    program: &Path,
    args: &[OsString],
    limit: Duration,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, ProcessError> {
    let name = program.display().to_string();
    let mut child = start(program, args).await?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let outcome = {
        // Both pipes are drained while the child runs, so a chatty child never blocks on a
        // full pipe; only bounded amounts are kept.
        let finished = async {
            tokio::join!(
                child.wait(),
                read_stdout(&mut stdout),
                read_stderr_tail(&mut stderr)
            )
        };
        tokio::select! {
            (status, out, err) = finished => Outcome::Exited(status, out, err),
            () = tokio::time::sleep(limit) => Outcome::TimedOut,
            () = cancel.cancelled() => Outcome::Cancelled,
        }
    };
    finish(outcome, &mut child, name, limit).await
}

/// Starts a long-running child fed through its stdin (piped, as is stderr; stdout is
/// discarded), tied to this process's life as [`run`]'s children are and killed when dropped.
/// The caller feeds it, closes its stdin and waits for it.
pub async fn spawn_fed(program: &Path, args: &[OsString]) -> Result<Child, ProcessError> {
    start_with(program, args, Stdio::piped(), Stdio::null()).await
}

/// Starts the child, tied to this process's life where the host allows (see
/// [`parent_death`]), with no stdin and both outputs piped.
async fn start(program: &Path, args: &[OsString]) -> Result<Child, ProcessError> {
    start_with(program, args, Stdio::null(), Stdio::piped()).await
}

/// [`start`] with the given stdin and stdout (stderr is always piped).
async fn start_with(
    program: &Path,
    args: &[OsString],
    stdin: Stdio,
    stdout: Stdio,
) -> Result<Child, ProcessError> {
    let name = program.display().to_string();
    let spawn_error = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::NotFound => ProcessError::NotFound {
            program: name.clone(),
        },
        _ => ProcessError::Spawn {
            program: name.clone(),
            source,
        },
    };
    let mut command = match parent_death() {
        Some(setpriv) => {
            // setpriv would report a missing program as its own exit status; finding it
            // first keeps "not found" a NotFound.
            let resolved =
                resolve(program).ok_or_else(|| spawn_error(std::io::ErrorKind::NotFound.into()))?;
            let mut command = Command::new(setpriv);
            command.args(["--pdeathsig", "KILL", "--"]).arg(resolved);
            command
        }
        None => Command::new(program),
    };
    command
        .args(args)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    spawn_from_lasting_thread(command)
        .await
        .map_err(spawn_error)
}

/// Reads stdout up to [`STDOUT_LIMIT`], then discards the rest.
async fn read_stdout(stdout: &mut ChildStdout) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = (&mut *stdout)
        .take(STDOUT_LIMIT)
        .read_to_end(&mut out)
        .await;
    let _ = tokio::io::copy(stdout, &mut tokio::io::sink()).await;
    out
}

/// Reads stderr to its end, keeping the last [`STDERR_TAIL`] bytes.
pub async fn read_stderr_tail(stderr: &mut ChildStderr) -> String {
    let mut tail = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > STDERR_TAIL * 2 {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    }
    let start = tail.len().saturating_sub(STDERR_TAIL);
    String::from_utf8_lossy(&tail[start..]).trim().to_owned()
}

/// Turns how the wait ended into the result, killing the child if it is still running.
async fn finish(
    outcome: Outcome,
    child: &mut Child,
    name: String,
    limit: Duration,
) -> Result<Vec<u8>, ProcessError> {
    match outcome {
        Outcome::Exited(status, out, err) => {
            let status = status.map_err(|source| ProcessError::Spawn {
                program: name.clone(),
                source,
            })?;
            if status.success() {
                Ok(out)
            } else {
                Err(ProcessError::Failed {
                    program: name,
                    status,
                    stderr: err,
                })
            }
        }
        Outcome::TimedOut => {
            kill(child).await;
            Err(ProcessError::TimedOut {
                program: name,
                limit,
            })
        }
        Outcome::Cancelled => {
            kill(child).await;
            Err(ProcessError::Cancelled { program: name })
        }
    }
}

enum Outcome {
    Exited(std::io::Result<ExitStatus>, Vec<u8>, String),
    TimedOut,
    Cancelled,
}

async fn kill(child: &mut Child) {
    // SIGKILL, then reap, so no zombie or orphan outlives the call.
    let _ = child.kill().await;
}

/// `setpriv` if it can give a child a parent-death signal here, checked once. Through it,
/// every tool runs as `setpriv --pdeathsig KILL -- TOOL ...`: setpriv sets the signal and
/// execs the tool in the same process, so the kernel SIGKILLs the tool when this process
/// dies, even by SIGKILL, where no `kill_on_drop` runs. (`unsafe` is forbidden in this
/// crate, which rules out calling `prctl` between fork and exec ourselves.) Without
/// setpriv (util-linux) a tool outlives a killed worker; that is logged once.
pub fn parent_death() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            let setpriv = resolve(Path::new("setpriv"))?;
            let works = std::process::Command::new(&setpriv)
                .args(["--pdeathsig", "KILL", "--", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if works {
                Some(setpriv)
            } else {
                tracing::warn!(
                    "setpriv (util-linux) cannot set a parent-death signal here: an FFmpeg started by this worker would outlive it if it is killed"
                );
                None
            }
        })
        .as_deref()
}

/// `program` as a path to an executable file: as given if it names a directory, else the
/// first match on `PATH`.
fn resolve(program: &Path) -> Option<PathBuf> {
    let executable = |path: &Path| {
        std::fs::metadata(path)
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() > 1 {
        return executable(program).then(|| program.to_owned());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| executable(path))
}

type SpawnJob = Box<dyn FnOnce() + Send>;

/// Spawns `command` from one thread that lives as long as the process. The parent-death
/// signal fires when the THREAD that forked the child exits, not the process: a child
/// forked from a short-lived thread (a `spawn_blocking` thread, or a runtime worker that
/// `block_in_place` retired) would be killed mid-encode when that thread ends.
async fn spawn_from_lasting_thread(mut command: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<std::sync::mpsc::Sender<SpawnJob>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, queue) = std::sync::mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("vidq-spawner".into())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })
            .expect("the process can start a thread");
        jobs
    });
    let runtime = tokio::runtime::Handle::current();
    let (reply, spawned) = tokio::sync::oneshot::channel();
    let job: SpawnJob = Box::new(move || {
        // The child's pipes and its reaping belong to the caller's runtime.
        let _runtime = runtime.enter();
        let _ = reply.send(command.spawn());
    });
    spawner
        .send(job)
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    spawned
        .await
        .map_err(|_| std::io::Error::other("the spawner thread dropped the request"))?
}
