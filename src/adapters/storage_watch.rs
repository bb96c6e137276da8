//! Whether the bucket answers, watched in the background by every role that starts without
//! it: a role starts when PostgreSQL answers, whatever S3 does (docs/operations.md, "S3
//! outages"). The watch says once, in a WARN, that storage does not answer and
//! what goes on meanwhile, and once, in an INFO, that it answers again; it never stops the
//! role. What needs S3 finds out on its own calls (`503 storage_unavailable`, the sweeper's
//! breaker, a worker's bounded wait).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::storage::Storage;

/// How often the bucket is asked while it does not answer.
const WHILE_DOWN: Duration = Duration::from_secs(2);
/// How often the bucket is asked while it answers.
const WHILE_UP: Duration = Duration::from_secs(30);

/// Watches `storage` until `stop`; `meanwhile` says what the role does while S3 is away.
pub async fn watch(storage: Storage, meanwhile: &'static str, stop: CancellationToken) {
    let mut answered: Option<bool> = None;
    loop {
        let check = tokio::select! {
            check = storage.check_bucket() => check,
            () = stop.cancelled() => return,
        };
        let answers = check.is_ok();
        match (answered, check) {
            (Some(true) | None, Err(error)) => tracing::warn!(
                bucket = storage.bucket(),
                error = %crate::telemetry::error_chain(&error),
                "object storage does not answer; {meanwhile} (checked again every {}s)",
                WHILE_DOWN.as_secs()
            ),
            (Some(false), Ok(())) => {
                tracing::info!(bucket = storage.bucket(), "object storage answers again");
            }
            _ => {}
        }
        answered = Some(answers);
        let pause = if answers { WHILE_UP } else { WHILE_DOWN };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return,
        }
    }
}
