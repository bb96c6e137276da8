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

/// How a role claims its bucket namespace when S3 or the database does not answer yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimWait {
    /// Wait for them: the sweeper, whose orphan pass must never run in a namespace it has not
    /// claimed.
    UntilAnswered,
    /// Start anyway and keep checking in the background; a foreign marker found later stops
    /// the process (the API and workers serve and encode meanwhile, as they do without S3).
    InBackground,
}

/// Claims the bucket namespace before a role starts (`app::deployment_marker`): a marker
/// naming another database stops the start with a message naming both.
pub(crate) async fn claim_namespace(
    storage: &crate::adapters::storage::Storage,
    pool: &crate::db::DbPool,
    wait: ClaimWait,
    shutdown: &tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    use crate::app::deployment_marker::{claim, claim_patiently};
    let first = match wait {
        ClaimWait::UntilAnswered => claim_patiently(storage, pool, shutdown).await,
        ClaimWait::InBackground => claim(storage, pool).await,
    };
    match first {
        Ok(_) => Ok(()),
        Err(error) if error.is_transient() && wait == ClaimWait::InBackground => {
            tracing::warn!(error = %crate::telemetry::error_chain(&error),
                "cannot check the bucket's deployment marker yet; starting, and checking in the background");
            let (storage, pool, shutdown) = (storage.clone(), pool.clone(), shutdown.clone());
            tokio::spawn(async move {
                if let Err(error) = claim_patiently(&storage, &pool, &shutdown).await
                    && !error.is_transient()
                {
                    tracing::error!(error = %error, "stopping: this deployment may not use the bucket");
                    std::process::exit(1);
                }
            });
            Ok(())
        }
        Err(error) => Err(anyhow::Error::new(error).context("claiming the bucket namespace")),
    }
}
