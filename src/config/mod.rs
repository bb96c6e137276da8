//! One typed configuration, read from command-line flags and `VIDQ_*` environment variables.
//!
//! Every setting is listed here with its default; `vidq <role> --help` prints them with the
//! variable that sets each. Configuration is passed to the code that needs it, never global.
//! Secrets (the database URL, which may hold a password) are wrapped so they never reach a
//! log line or a `Debug` print.

mod api;
mod dev;
mod ingest;
mod relay;
mod shared;
mod sweeper;
mod worker;

pub use api::{
    AdminArgs, ApiConfig, CorsOrigins, DEFAULT_CONFIRM_COMMITTERS, HttpConfig, HttpLimits,
    PlaybackArgs, UploadConfig, WebhookArgs,
};
pub use dev::{DevConfig, DevPostgres};
pub use ingest::{IngestArgs, LiveArgs, RtmpArgs, RtmpListen, SpoolArgs};
pub use relay::{RelayArgs, RelayConfig};
pub use shared::{
    CaCertificates, DatabaseConfig, DatabaseUrl, LogArgs, LogFormat, S3Timeouts, Secret,
    StorageConfig, loopback_addr,
};
pub use sweeper::{ReconcileConfig, SweeperArgs, SweeperConfig};
pub use worker::{MediaArgs, QueueArgs, WorkerConfig};

use clap::Parser;

/// Parses the command line like `T::parse()`, but a missing or bad setting's error also names
/// the environment variable that sets it, since services are usually configured that way.
pub fn parse_cli<T: Parser>() -> T {
    match T::try_parse() {
        Ok(parsed) => parsed,
        Err(err) => {
            use clap::error::ErrorKind;
            let names_a_setting = matches!(
                err.kind(),
                ErrorKind::MissingRequiredArgument
                    | ErrorKind::InvalidValue
                    | ErrorKind::ValueValidation
            );
            if names_a_setting {
                let rendered = err.render().to_string();
                let hints = env_hints(&T::command(), &rendered);
                eprint!("{rendered}");
                for hint in hints {
                    eprintln!("  hint: {hint}");
                }
                std::process::exit(2);
            }
            err.exit()
        }
    }
}

/// For each `--flag` mentioned in a clap error, "set it with --flag or VARIABLE".
fn env_hints(command: &clap::Command, message: &str) -> Vec<String> {
    let mut hints = Vec::new();
    let mut stack = vec![command.clone()];
    while let Some(cmd) = stack.pop() {
        for arg in cmd.get_arguments() {
            if let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) {
                let flag = format!("--{long}");
                let mentioned = message.match_indices(&flag).any(|(i, _)| {
                    !message[i + flag.len()..]
                        .starts_with(|c: char| c == '-' || c.is_alphanumeric())
                });
                let hint = format!(
                    "{flag} is also set by the environment variable {}",
                    env.to_string_lossy()
                );
                if mentioned && !hints.contains(&hint) {
                    hints.push(hint);
                }
            }
        }
        stack.extend(cmd.get_subcommands().cloned());
    }
    hints
}
