//! The `api` role: migrations (unless told not to), the pool, the bucket, the HTTP server.

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::adapters::storage::{StaticCredentials, Storage};
use crate::app::AppContext;
use crate::app::playback::PlaybackSettings;
use crate::config::{ApiConfig, DatabaseConfig, StorageConfig, UploadConfig};
use crate::db;

/// Runs the API until `shutdown` is cancelled.
pub async fn run(config: ApiConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let playback = PlaybackSettings::from_args(&config.playback)
        .context("VIDQ_PLAYBACK_SECRET (--playback-secret)")?;
    if config.no_migrate {
        tracing::info!("skipping migrations (--no-migrate)");
    } else {
        migrate(&config.database).await?;
    }
    let operators = crate::app::operators::OperatorAccess::from_args(&config.admin)
        .map_err(anyhow::Error::msg)?;
    let mut ctx = context(&config.database, &config.storage, &config.upload, None).await?;
    super::claim_namespace(&ctx.storage, &ctx.db, &shutdown).await?;
    ctx.webhooks = config.webhooks;
    ctx.playback = playback;
    ctx.operators = operators;
    ctx.ready_requires_storage = config.ready_requires_storage;
    let node = NodeSettings {
        node_id: super::spool_node(config.node_id.as_deref()),
        spool_dir: config.spool.dir_or("spool"),
        ingest: &config.ingest,
        rtmp: &config.rtmp,
        live: config.live,
    };
    let listeners = attach_ingest(&mut ctx, node, config.database.url.expose(), &shutdown).await?;
    if let Some(ingest) = &ctx.ingest {
        say_where_uploads_go(ingest);
    }
    tokio::spawn(expire_s3_uploads(ctx.clone(), shutdown.child_token()));
    if config.playback.secret.is_none() && config.playback.public_base_url.is_none() {
        tracing::warn!(
            "VIDQ_PLAYBACK_SECRET is not set: this process signs hls_url tokens with a key of \
             its own, which other API nodes refuse and a restart forgets; give every API node \
             the same secret"
        );
    }
    watch_storage(&ctx, config.ingest.store(), &shutdown);
    let listener = std::net::TcpListener::bind(config.http.addr)
        .with_context(|| format!("cannot listen on {} (VIDQ_HTTP_ADDR)", config.http.addr))?;
    tracing::info!(addr = %config.http.addr, "API listening");
    if ctx.operators.token.is_some() {
        tracing::info!(url = %format!("http://{}/admin", config.http.addr), "operator dashboard on");
    }
    tracing::info!(addr = %config.ingest.ingest_addr, "live ingest listening");
    let rtmp = serve_ingest(
        listeners,
        &ctx,
        &config.rtmp,
        &config.http.limits(),
        &shutdown,
    )
    .await?;
    crate::http::serve_with(listener, ctx, config.http.limits(), shutdown)?.await?;
    if let Some(rtmp) = rtmp {
        // Each RTMP stream's FFmpeg writes its last segment and playlist before the process
        // goes.
        if tokio::time::timeout(RTMP_DRAIN, rtmp).await.is_err() {
            tracing::warn!("RTMP streams still ending after {RTMP_DRAIN:?}; stopping anyway");
        }
    }
    tracing::info!("API stopped");
    Ok(())
}

/// Says at start where this node's uploads through vidq go, and what that asks of the
/// operator.
fn say_where_uploads_go(ingest: &crate::app::ingest::Ingest) {
    match ingest.store {
        crate::domain::upload::UploadStore::Spool => tracing::info!(
            spool = %ingest.spool.path().display(),
            node = %ingest.node_id,
            "uploads through vidq (tus, PUT) spool here; run `vidq sweeper` on this node with \
             the same VIDQ_SPOOL_DIR and VIDQ_NODE_ID to land them in S3"
        ),
        crate::domain::upload::UploadStore::S3 => tracing::info!(
            part_bytes = ingest.part_bytes,
            "uploads through vidq (tus, PUT) go straight into S3 multipart uploads; any API node \
             serves any of their requests (live ingest still spools here)"
        ),
    }
}

/// Watches the bucket until `shutdown`, saying once what goes on while S3 does not answer.
fn watch_storage(
    ctx: &AppContext,
    store: crate::domain::upload::UploadStore,
    shutdown: &CancellationToken,
) {
    // The node serves whatever S3 does: ingest into the spool needs only PostgreSQL, and the
    // sweeper lands the bytes once S3 answers. What needs S3 answers `503 storage_unavailable`
    // meanwhile; `/readyz` names storage in its body (and is 503 only when told to be).
    let meanwhile = match store {
        crate::domain::upload::UploadStore::Spool => {
            "tus, single PUT and live ingest go on into the spool; confirms of presigned \
             uploads answer 503 storage_unavailable (check VIDQ_S3_ENDPOINT, VIDQ_S3_BUCKET and \
             the AWS credentials)"
        }
        crate::domain::upload::UploadStore::S3 => {
            "live ingest goes on into the spool; tus, single PUT (VIDQ_TUS_STORE=s3) and \
             confirms of presigned uploads answer 503 storage_unavailable (check \
             VIDQ_S3_ENDPOINT, VIDQ_S3_BUCKET and the AWS credentials)"
        }
    };
    tokio::spawn(crate::adapters::storage_watch::watch(
        ctx.storage.clone(),
        meanwhile,
        shutdown.child_token(),
    ));
}

/// What makes a process an API node besides its `/v1` routes.
pub struct NodeSettings<'a> {
    /// The node's name: its spool rows and its presence on the dashboard carry it.
    pub node_id: String,
    /// Where uploads through vidq and live files spool.
    pub spool_dir: std::path::PathBuf,
    /// The tus store, the live ingest listener and resumable uploads' lifetime.
    pub ingest: &'a crate::config::IngestArgs,
    /// The RTMP listener.
    pub rtmp: &'a crate::config::RtmpArgs,
    /// Live recordings' idle and grace times.
    pub live: crate::config::LiveArgs,
}

/// The listeners an API node serves besides `/v1`: live ingest, and RTMP unless it is off.
pub struct IngestListeners {
    ingest: tokio::net::TcpListener,
    rtmp: Option<tokio::net::TcpListener>,
}

/// Makes `ctx` an API node (`vidq api` and `vidq dev` alike): its presence on the dashboard,
/// its spool and ingest settings in `ctx.ingest`, its ingest and RTMP listeners bound (served
/// by [`serve_ingest`]), and the LISTEN that wakes long-polling event readers.
pub async fn attach_ingest(
    ctx: &mut AppContext,
    node: NodeSettings<'_>,
    database_url: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<IngestListeners> {
    report_presence(ctx, &node.node_id, shutdown);
    let ingest_listener = bind_ingest(node.ingest).await?;
    let rtmp_listener = bind_rtmp(node.rtmp).await?;
    let mut ingest = ingest(
        &node.spool_dir,
        node.node_id,
        node.ingest,
        node.live,
        ingest_listener.local_addr()?.port(),
    )?;
    ingest.rtmp = rtmp_at(node.rtmp, rtmp_listener.as_ref())?;
    ctx.ingest = Some(ingest);
    listen_for_events(ctx, database_url, shutdown).await;
    Ok(IngestListeners {
        ingest: ingest_listener,
        rtmp: rtmp_listener,
    })
}

impl IngestListeners {
    /// Where RTMP encoders connect, if RTMP is on.
    pub fn rtmp_addr(&self) -> std::io::Result<Option<std::net::SocketAddr>> {
        self.rtmp.as_ref().map(|l| l.local_addr()).transpose()
    }
}

/// Serves live ingest and RTMP on `listeners` until `shutdown`; the RTMP task, if any, ends
/// once every stream has ended.
pub async fn serve_ingest(
    listeners: IngestListeners,
    ctx: &AppContext,
    rtmp: &crate::config::RtmpArgs,
    limits: &crate::config::HttpLimits,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    crate::http::ingest_server::serve(
        listeners.ingest,
        ctx.clone(),
        limits.into(),
        shutdown.clone(),
    );
    match listeners.rtmp {
        Some(listener) => Ok(Some(
            serve_rtmp(listener, ctx, rtmp, limits, shutdown).await?,
        )),
        None => Ok(None),
    }
}

/// This node's spool for uploads through vidq; `ingest_port`: where the live ingest
/// listener listens (its URL is made from it unless a public one is set).
pub fn ingest(
    spool_dir: &std::path::Path,
    node_id: String,
    args: &crate::config::IngestArgs,
    live: crate::config::LiveArgs,
    ingest_port: u16,
) -> anyhow::Result<crate::app::ingest::Ingest> {
    use crate::app::ingest::LiveIngestAt;
    let spool = crate::adapters::spool::SpoolRoot::open(spool_dir).context("VIDQ_SPOOL_DIR")?;
    let (incoming, swept) =
        crate::adapters::incoming::IncomingDir::claim(&spool).with_context(|| {
            format!(
                "cannot make this process's incoming directory in {}",
                spool.path().display()
            )
        })?;
    if swept.directories > 0 || swept.files > 0 {
        tracing::info!(
            directories = swept.directories,
            files = swept.files,
            "removed the incoming files of API processes that stopped mid-request"
        );
    }
    Ok(crate::app::ingest::Ingest {
        spool,
        incoming: std::sync::Arc::new(incoming),
        store: args.store(),
        part_bytes: args.tus_part_bytes,
        node_id,
        ttl: std::time::Duration::from_secs(args.resumable_ttl_secs),
        live_grace: std::time::Duration::from_secs(live.grace_secs),
        db_patience: std::time::Duration::from_secs(live.db_patience_secs),
        live_keys: Default::default(),
        live_ingest: match &args.ingest_public_url {
            Some(url) => LiveIngestAt::Public(url.as_str().to_owned()),
            None => LiveIngestAt::Port(ingest_port),
        },
        locks: Default::default(),
        rtmp: None,
    })
}

/// How often an API node looks for expired `s3`-store uploads to abort.
const S3_EXPIRY_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Aborts the multipart uploads of expired `s3`-store uploads, every few seconds, on every
/// API node (each takes its rows with SKIP LOCKED), until `shutdown`.
async fn expire_s3_uploads(ctx: AppContext, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(S3_EXPIRY_EVERY) => {}
        }
        if let Err(error) = crate::app::ingest_s3::expire_due(&ctx).await {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not abort expired uploads' multipart uploads; trying again shortly");
        }
    }
}

/// Reports this API node on the dashboard every few seconds.
pub fn report_presence(ctx: &AppContext, node_id: &str, shutdown: &CancellationToken) {
    super::presence::spawn(
        ctx.db.clone(),
        super::presence::Presence {
            role: "api",
            node_id: node_id.to_owned(),
            slots: 0,
            detail: std::sync::Arc::new(|| serde_json::json!({})),
        },
        shutdown.child_token(),
    );
}

/// Binds the live ingest listener (`VIDQ_INGEST_ADDR`).
pub async fn bind_ingest(
    args: &crate::config::IngestArgs,
) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(args.ingest_addr)
        .await
        .with_context(|| format!("cannot listen on {} (VIDQ_INGEST_ADDR)", args.ingest_addr))
}

/// Binds the RTMP listener (`VIDQ_RTMP_ADDR`), unless it is `off`.
pub async fn bind_rtmp(
    args: &crate::config::RtmpArgs,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    match args.rtmp_addr {
        crate::config::RtmpListen::Off => Ok(None),
        crate::config::RtmpListen::At(addr) => tokio::net::TcpListener::bind(addr)
            .await
            .map(Some)
            .with_context(|| {
                format!("cannot listen on {addr} (VIDQ_RTMP_ADDR; `off` runs no RTMP listener)")
            }),
    }
}

/// How recordings' `rtmp_url` is made: the public URL if set, else the listener's port.
pub fn rtmp_at(
    args: &crate::config::RtmpArgs,
    listener: Option<&tokio::net::TcpListener>,
) -> anyhow::Result<Option<crate::app::ingest::LiveIngestAt>> {
    use crate::app::ingest::LiveIngestAt;
    let Some(listener) = listener else {
        return Ok(None);
    };
    Ok(Some(match &args.rtmp_public_url {
        Some(url) => LiveIngestAt::Public(url.as_str().to_owned()),
        None => LiveIngestAt::Port(listener.local_addr()?.port()),
    }))
}

/// Longest a stopping API waits for its RTMP streams' FFmpeg children to write their last
/// files.
const RTMP_DRAIN: std::time::Duration = std::time::Duration::from_secs(25);

/// Serves RTMP ingest on `listener` with the API port's per-address and idle limits; the
/// task ends after `shutdown`, once every stream has ended.
pub async fn serve_rtmp(
    listener: tokio::net::TcpListener,
    ctx: &AppContext,
    args: &crate::config::RtmpArgs,
    limits: &crate::config::HttpLimits,
    shutdown: &CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    tracing::info!(addr = %listener.local_addr()?, "RTMP ingest listening (rtmp://HOST:PORT/live, the stream key as the stream name)");
    crate::rtmp::serve(
        listener,
        ctx.clone(),
        crate::rtmp::RtmpSettings {
            ffmpeg: args.rtmp_ffmpeg.clone(),
            max_connections_per_ip: limits.max_connections_per_ip,
            body_idle: limits.body_idle,
        },
        shutdown.clone(),
    )
    .await
}

/// Applies pending migrations, logging how many ran.
pub async fn migrate(database: &DatabaseConfig) -> anyhow::Result<()> {
    let applied = db::migrations::run_pending(database.url.expose())
        .await
        .context("applying migrations (DATABASE_URL)")?;
    tracing::info!(applied, "database schema is up to date");
    Ok(())
}

/// Ticks `ctx.events` on every NOTIFY from a transaction that wrote an outbox row, and makes
/// producers send one while feed readers wait, so long-polling readers answer as soon as an
/// event commits.
pub async fn listen_for_events(ctx: &AppContext, database_url: &str, shutdown: &CancellationToken) {
    let signal = ctx.events.clone();
    crate::queue::listener::spawn(
        database_url.to_owned(),
        db::deliveries::outbox::EVENTS_CHANNEL,
        move || signal.tick(),
        shutdown.child_token(),
    )
    .await;
    tokio::spawn(crate::app::events::keep_readers_woken(
        ctx.events.clone(),
        database_url.to_owned(),
        shutdown.child_token(),
    ));
}

/// Connects the pool and the storage clients every use-case shares.
pub async fn context(
    database: &DatabaseConfig,
    storage: &StorageConfig,
    upload: &UploadConfig,
    credentials: Option<StaticCredentials>,
) -> anyhow::Result<AppContext> {
    let pool = db::connect(database.url.expose(), database.pool_size)
        .await
        .context("connecting to the database (DATABASE_URL)")?;
    let storage = Storage::connect(storage, credentials).await;
    let confirms = crate::app::confirm_batch::ConfirmBatcher::start(pool.clone(), upload.into());
    Ok(AppContext {
        confirms,
        status_reads: crate::app::status_reads::StatusReads::start(pool.clone()),
        db: pool,
        storage,
        upload: upload.clone(),
        webhooks: crate::config::WebhookArgs::default(),
        events: crate::app::events::EventSignal::default(),
        playback: PlaybackSettings::generated(),
        ingest: None,
        operators: Default::default(),
        in_process_worker: None,
        ready_requires_storage: false,
        page_key: None,
    })
}
