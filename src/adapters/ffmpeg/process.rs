//! Running one tool as a child process: no stdin, stdout collected, the tail of stderr kept
//! for the error, a wall-clock timeout, and SIGKILL on timeout, cancellation or drop.

use std::ffi::OsString;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;
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
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => ProcessError::NotFound {
                program: name.clone(),
            },
            _ => ProcessError::Spawn {
                program: name.clone(),
                source,
            },
        })?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    // Both pipes are drained while the child runs, so a chatty child never blocks on a full
    // pipe; only bounded amounts are kept.
    let read_stdout = async {
        let mut out = Vec::new();
        let _ = (&mut stdout).take(STDOUT_LIMIT).read_to_end(&mut out).await;
        let _ = tokio::io::copy(&mut stdout, &mut tokio::io::sink()).await;
        out
    };
    let read_stderr = async {
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
    };
    let outcome = {
        let finished = async { tokio::join!(child.wait(), read_stdout, read_stderr) };
        tokio::select! {
            (status, out, err) = finished => Outcome::Exited(status, out, err),
            () = tokio::time::sleep(limit) => Outcome::TimedOut,
            () = cancel.cancelled() => Outcome::Cancelled,
        }
    };
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
            kill(&mut child).await;
            Err(ProcessError::TimedOut {
                program: name,
                limit,
            })
        }
        Outcome::Cancelled => {
            kill(&mut child).await;
            Err(ProcessError::Cancelled { program: name })
        }
    }
}

enum Outcome {
    Exited(std::io::Result<ExitStatus>, Vec<u8>, String),
    TimedOut,
    Cancelled,
}

async fn kill(child: &mut tokio::process::Child) {
    // SIGKILL, then reap, so no zombie or orphan outlives the call.
    let _ = child.kill().await;
}
