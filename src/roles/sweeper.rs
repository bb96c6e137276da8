//! The `sweeper` role (also part of `vidq dev`): wiring around [`crate::sweeper`], which
//! re-drives this node's pending uploads from the ledger to S3 and expires lapsed presigned
//! contracts.

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::adapters::spool::SpoolRoot;
use crate::adapters::storage::Storage;
pub use crate::config::{SweeperArgs, SweeperConfig};
use crate::db;
use crate::sweeper::Sweeper;

/// Most connections a sweeper's pool holds: one per worker and one for the reader.
pub fn pool_size(args: &SweeperArgs) -> u32 {
    args.workers.saturating_add(1).min(32)
}

/// Runs the sweeper role until `shutdown`.
pub async fn run(config: SweeperConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let storage = Storage::connect(&config.storage, None).await;
    let node_id = super::spool_node(config.node_id.as_deref());
    let spool = config.spool.dir_or("spool");
    let node = SweeperNode {
        node_id,
        spool_dir: spool,
        health_listen: config.health_listen,
    };
    run_with(
        config.database.url.expose(),
        &config.sweeper,
        config.live,
        node,
        storage,
        shutdown,
    )
    .await
}

/// Where a sweeper runs: its node's name, that node's spool, and its health listener.
#[derive(Debug, Clone)]
pub struct SweeperNode {
    /// Rows of this node only.
    pub node_id: String,
    /// The node's spool root.
    pub spool_dir: std::path::PathBuf,
    /// `/healthz` and `/metrics` on this loopback address, if any.
    pub health_listen: Option<std::net::SocketAddr>,
}

/// Runs a sweeper with a storage client already built (`vidq dev` passes the embedded S3's).
pub async fn run_with(
    database_url: &str,
    args: &SweeperArgs,
    live: crate::config::LiveArgs,
    node: SweeperNode,
    storage: Storage,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let SweeperNode {
        node_id,
        spool_dir,
        health_listen,
    } = node;
    let spool_dir = spool_dir.as_path();
    let root = SpoolRoot::open(spool_dir).context("VIDQ_SPOOL_DIR")?;
    let pool = db::connect(database_url, pool_size(args))
        .await
        .context("connecting to the database (DATABASE_URL)")?;
    // The orphan pass deletes what the database does not know: never in a namespace this
    // deployment has not claimed (the rest of the sweeper runs meanwhile).
    let claimed = super::claim_namespace(&storage, &pool, &shutdown).await?;
    tracing::info!(node = %node_id, spool = %root.path().display(), "sweeper started");
    tokio::spawn(crate::adapters::storage_watch::watch(
        storage.clone(),
        "the spool keeps what arrives and the breaker retries until S3 is back",
        shutdown.child_token(),
    ));
    let sweeper = Sweeper::start(
        pool.clone(),
        storage,
        root,
        args.settings(node_id.clone(), live),
        shutdown.clone(),
    );
    sweeper.hold_orphan_pass_until(claimed);
    let health = std::sync::Arc::new(sweeper.health());
    super::presence::spawn(
        pool,
        super::presence::Presence {
            role: "sweeper",
            node_id: node_id.clone(),
            slots: args.workers,
            detail: super::presence::from_health(health.clone()),
        },
        shutdown.child_token(),
    );
    if let Some(addr) = health_listen {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("cannot listen on {addr} (VIDQ_HEALTH_LISTEN)"))?;
        let server = crate::http::health_listener::serve(listener, health, shutdown.clone())?;
        tracing::info!(%addr, "health listener on /healthz and /metrics");
        tokio::spawn(server);
    }
    let wake = sweeper.waker();
    crate::queue::listener::spawn(
        database_url.to_owned(),
        db::uploads::receiving::SWEEP_CHANNEL,
        move || wake.notify_one(),
        shutdown.child_token(),
    )
    .await;
    sweeper.run(shutdown).await;
    tracing::info!("sweeper stopped");
    Ok(())
}
