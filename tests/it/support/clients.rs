//! The real tus clients under `tests/clients` (tus-js-client on Node.js, tuspy on Python),
//! run against an endpoint.

use std::path::{Path, PathBuf};

use serde_json::Value;

pub fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// Runs one client against `endpoint`; returns its JSON line.
pub async fn run_client(
    program: &str,
    script: &str,
    endpoint: &str,
    key: &str,
    file: &Path,
) -> Value {
    run_client_with(program, script, endpoint, key, file, (65_536, 5, 0.2)).await
}

/// [`run_client`] with its chunk size, retries and delay between them (seconds).
pub async fn run_client_with(
    program: &str,
    script: &str,
    endpoint: &str,
    key: &str,
    file: &Path,
    (chunk, retries, delay): (usize, u32, f64),
) -> Value {
    let script = clients_dir().join(script);
    let out = tokio::process::Command::new(program)
        .arg(&script)
        .args(["--endpoint", endpoint, "--token", key])
        .arg("--file")
        .arg(file)
        .args(["--chunk-size", &chunk.to_string()])
        .args(["--retries", &retries.to_string()])
        .args(["--retry-delay", &delay.to_string()])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{program} could not start: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed (install the clients: npm ci --prefix tests/clients; \
         python3 -m pip install -r tests/clients/requirements.txt):\n{stderr}",
        script.display()
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{}: not one JSON line ({e}): {stderr}", script.display()))
}
