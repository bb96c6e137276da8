//! The `vidq` binary run to completion, as an operator runs a command.

use std::process::Output;

use tokio::process::Command;

/// Runs the binary without blocking the runtime (the test's S3 server lives on it).
pub async fn vidq(args: &[&str], env: &[(&str, &str)]) -> Output {
    // In a directory of its own: a role's relative defaults (`./spool`) stay out of the
    // checkout.
    let cwd = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_vidq"));
    command
        .args(args)
        .current_dir(cwd.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // Any free port: tests run side by side, and 1935 (the default) is one port.
        .env("VIDQ_RTMP_ADDR", "127.0.0.1:0");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().await.unwrap()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
