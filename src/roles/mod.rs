//! The long-running processes: loops and wiring, little logic.

pub mod api;
pub mod dev;
pub mod presence;
pub mod relay;
pub mod sweeper;
pub mod worker;

/// This machine's host name, if it has one.
pub(crate) fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

/// The node name that ties spool files to the sweeper that lands them: the configured one,
/// else the host name, else `vidq` (the API and the sweeper of one node must agree, so no
/// process id goes into it).
pub(crate) fn spool_node(configured: Option<&str>) -> String {
    configured
        .map(str::to_owned)
        .or_else(host_name)
        .unwrap_or_else(|| "vidq".to_owned())
}

/// Claims the bucket namespace before a role starts (`app::deployment_marker`): a marker
/// naming another database stops the start with a message naming both. When S3 or the
/// database does not answer within a few seconds, the role starts anyway (every role starts
/// whatever S3 does) and the claim goes on in the background: a foreign marker found then
/// stops the process. The flag returned turns `true` once the namespace is this
/// deployment's; the sweeper runs no orphan pass before.
pub(crate) async fn claim_namespace(
    storage: &crate::adapters::storage::Storage,
    pool: &crate::db::DbPool,
    shutdown: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    use crate::app::deployment_marker::{claim, claim_patiently};
    use std::sync::atomic::{AtomicBool, Ordering};
    let claimed = std::sync::Arc::new(AtomicBool::new(false));
    let first = tokio::time::timeout(std::time::Duration::from_secs(3), claim(storage, pool)).await;
    match first {
        Ok(Ok(_)) => claimed.store(true, Ordering::SeqCst),
        Ok(Err(error)) if !error.is_transient() => {
            return Err(anyhow::Error::new(error).context("claiming the bucket namespace"));
        }
        not_yet => {
            if let Ok(Err(error)) = &not_yet {
                tracing::warn!(error = %crate::telemetry::error_chain(error),
                    "cannot check the bucket's deployment marker yet; starting, and checking in the background");
            } else {
                tracing::warn!(
                    "the bucket's deployment marker did not answer within 3 s; starting, and checking in the background"
                );
            }
            let (storage, pool, shutdown) = (storage.clone(), pool.clone(), shutdown.clone());
            let flag = claimed.clone();
            tokio::spawn(async move {
                match claim_patiently(&storage, &pool, &shutdown).await {
                    Ok(_) => flag.store(true, Ordering::SeqCst),
                    Err(error) if !error.is_transient() => {
                        tracing::error!(error = %error, "stopping: this deployment may not use the bucket");
                        std::process::exit(1);
                    }
                    Err(_) => {} // shutting down
                }
            });
        }
    }
    Ok(claimed)
}
