//! In debug builds only: every (method, route, status) a process answers, written once each
//! to a file, so the test suite can hold the OpenAPI document to every answer the API gave
//! while it ran (`tests/routes_documented.rs`). Off unless the test harness turns it on,
//! with [`record_to`] in its own process or `VIDQ_ROUTE_LOG_DIR` for the `vidq` processes it
//! starts; a release build never records.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use crate::sync::Locked;

struct Recorder {
    file: PathBuf,
    seen: Mutex<HashSet<(String, String, u16)>>,
}

static RECORDER: OnceLock<Option<Recorder>> = OnceLock::new();

/// Records this process's answers under `dir` (`routes-<pid>.txt`); only the first call of
/// a process (or the environment, if it was read first) counts.
pub fn record_to(dir: PathBuf) {
    let _ = RECORDER.set(Some(recorder(dir)));
}

fn recorder(dir: PathBuf) -> Recorder {
    let _ = std::fs::create_dir_all(&dir);
    Recorder {
        file: dir.join(format!("routes-{}.txt", std::process::id())),
        seen: Mutex::new(HashSet::new()),
    }
}

/// Notes that `method route` answered `status` (a no-op unless recording).
pub fn record(method: &str, route: &str, status: u16) {
    if !cfg!(debug_assertions) {
        return;
    }
    let recorder = RECORDER.get_or_init(|| {
        std::env::var_os("VIDQ_ROUTE_LOG_DIR").map(|dir| recorder(PathBuf::from(dir)))
    });
    let Some(recorder) = recorder else {
        return;
    };
    let new = recorder
        .seen
        .locked()
        .insert((method.to_owned(), route.to_owned(), status));
    if new
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&recorder.file)
    {
        let _ = writeln!(file, "{method} {route} {status}");
    }
}
