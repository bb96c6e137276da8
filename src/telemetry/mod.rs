//! Logging set-up: human-readable lines (or, with `VIDQ_LOG_FORMAT=json`, one JSON object per
//! line) on stderr, filtered by `RUST_LOG` (default `info`).
//!
//! Logs go to stderr so that commands whose stdout is an answer (`vidq user create` prints
//! only the new key) stay scriptable. A worker's account of itself, which its health
//! listener and the API's `/metrics` read, is [`worker_health`].

pub mod worker_health;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub use crate::config::LogFormat;

/// Installs the global subscriber once with `info` unless `RUST_LOG` says otherwise.
pub fn init(format: LogFormat) {
    init_with_default("info", format);
}

/// Installs the global subscriber once; `default` applies when `RUST_LOG` is unset
/// (benchmarks default to `warn`, so a log line per job does not become what they measure).
pub fn init_with_default(default: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // actix-http logs every malformed request it answers 400 or 431 at ERROR ("stream
        // error"): a client's mistake, not the server's, and a free way to flood the log.
        // The embedded S3 server of `vidq dev` (s3s) logs every refused request (a bad
        // signature, an expired presigned URL) at ERROR, twice: the client gets the S3 error
        // and the log stays for the server's own failures.
        EnvFilter::new(format!(
            "{default},aws_config=warn,aws_smithy_runtime=warn,actix_http::h1::dispatcher=off,s3s::ops=off"
        ))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}

/// An error and all its causes on one line (`outer: inner: root`), for log fields.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some errors repeat their source's message; print each message once.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
