//! Keeping a claim alive: extend the lease every few seconds with an UPDATE fenced on the
//! claim token. Zero rows, or no successful renewal for a whole lease, means the claim is
//! lost: the attempt is stopped (FFmpeg killed) and its result dropped.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Claim;
use crate::db::{self, DbPool};

/// Why an attempt was stopped before its body returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The claim is no longer ours.
    Lost,
    /// The process is shutting down: hand the job back.
    Shutdown,
    /// The attempt ran past its hard deadline.
    Deadline,
}

/// Renews the lease until `stop` fires; on loss, records why and fires `stop` itself.
pub async fn keep_alive(
    pool: DbPool,
    claim: Claim,
    lease: Duration,
    every: Duration,
    stop: CancellationToken,
    reason: Arc<OnceLock<StopReason>>,
) {
    let mut last_renewed = Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let renewed = async {
            let mut conn = pool.get().await.map_err(|e| e.to_string())?;
            db::jobs::heartbeat(&mut conn, claim.job_id, claim.token, lease.as_secs_f64())
                .await
                .map_err(|e| e.to_string())
        };
        // A renewal that hangs counts as a failed one: bound it by what is left of the lease.
        let left = lease
            .saturating_sub(last_renewed.elapsed())
            .max(Duration::from_millis(100));
        match tokio::time::timeout(left, renewed).await {
            Ok(Ok(1)) => last_renewed = Instant::now(),
            Ok(Ok(_)) => {
                tracing::warn!(
                    job_id = claim.job_id,
                    "heartbeat matched nothing: the claim is lost"
                );
                let _ = reason.set(StopReason::Lost);
                stop.cancel();
                return;
            }
            Ok(Err(error)) => {
                crate::metrics::HEARTBEAT_FAILURES.inc();
                tracing::warn!(job_id = claim.job_id, %error, "heartbeat failed");
            }
            Err(_) => {
                crate::metrics::HEARTBEAT_FAILURES.inc();
                tracing::warn!(job_id = claim.job_id, "heartbeat timed out");
            }
        }
        if last_renewed.elapsed() >= lease {
            tracing::warn!(
                job_id = claim.job_id,
                "no heartbeat for a whole lease: the claim is lost"
            );
            let _ = reason.set(StopReason::Lost);
            stop.cancel();
            return;
        }
    }
}
