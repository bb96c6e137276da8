//! Statements run again while the database is out of reach for a moment (a restart, a
//! failover): a worker that loses its connection while recording an upload of its outputs
//! waits for the server instead of failing the attempt, which would cost a whole encode
//! and one of the job's attempts. Only for statements that may run twice (an upsert, a CAS
//! that accepts its own earlier success).

use std::time::{Duration, Instant};

use super::DbError;

/// How long a statement keeps trying: longer than a fast restart or a failover takes,
/// shorter than a job's lease.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// Runs `once` until it succeeds, fails for another reason than the database's absence
/// ([`DbError::is_unavailable`]), or [`PATIENCE`] has passed; `what` names it in the log.
pub async fn while_unavailable<T, F, Fut>(what: &str, once: F) -> Result<T, DbError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DbError>>,
{
    while_unavailable_for(PATIENCE, what, once).await
}

/// [`while_unavailable`] for `patience` instead of [`PATIENCE`].
pub async fn while_unavailable_for<T, F, Fut>(
    patience: Duration,
    what: &str,
    mut once: F,
) -> Result<T, DbError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DbError>>,
{
    let give_up = Instant::now() + patience;
    let mut pause = Duration::from_millis(100);
    let mut failed = 0;
    loop {
        match once().await {
            Err(error) if error.is_unavailable() && Instant::now() + pause < give_up => {
                failed += 1;
                if failed == 1 {
                    tracing::warn!(error = %crate::telemetry::error_chain(&error),
                        "{what}: the database is unavailable; trying again");
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            result => {
                if failed > 0 && result.is_ok() {
                    tracing::info!(tries = failed + 1, "{what}: the database answers again");
                }
                return result;
            }
        }
    }
}
