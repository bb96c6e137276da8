//! The `dev` role: everything on one machine for a laptop. Creates the database if needed,
//! migrates, starts an embedded S3-compatible server over a local directory, creates the
//! bucket and runs the API, a worker, a relay and an upload sweeper. Not the production shape: there, each role is its own process
//! and S3 is S3.

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::adapters::private_pg::PrivatePostgres;
use crate::adapters::s3_server::EmbeddedS3;
use crate::adapters::storage::StaticCredentials;
pub use crate::config::DevConfig;
use crate::config::DevPostgres;
use crate::config::{DatabaseConfig, Secret, StorageConfig};
use crate::db;

/// Access key of the embedded S3 server (it listens on loopback only).
pub const DEV_ACCESS_KEY: &str = "vidq-dev";
/// Secret key of the embedded S3 server.
pub const DEV_SECRET_KEY: &str = "vidq-dev-secret";
/// Bucket `vidq dev` creates and uses.
pub const DEV_BUCKET: &str = "vidq";

/// Runs every part of vidq in this process until `shutdown` is cancelled; a private
/// PostgreSQL it started for itself is stopped afterwards.
pub async fn run(config: DevConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (database_url, private) = database(&config).await?;
    let result = run_on(&config, &database_url, shutdown).await;
    if let Some(private) = private {
        private.stop().await;
    }
    result
}

/// The database URL to use, and the private server started for it if any.
async fn database(config: &DevConfig) -> anyhow::Result<(String, Option<PrivatePostgres>)> {
    if let Some(url) = &config.database_url {
        return Ok((url.clone(), None));
    }
    let local = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        tokio::net::TcpStream::connect("127.0.0.1:5432"),
    )
    .await
    .is_ok_and(|c| c.is_ok());
    if config.postgres == DevPostgres::Auto && local {
        let url = "postgres://localhost/vidq".to_owned();
        // A server that answers but refuses this user (a packaged PostgreSQL asks for a
        // password on TCP) is no reason to stop a newcomer: vidq runs its own instead.
        let maintenance = db::pool::with_database(&url, "postgres")?;
        match db::pool::dedicated(&maintenance).await {
            Ok(_) => return Ok((url, None)),
            Err(error) => tracing::warn!(
                error = %crate::telemetry::error_chain(&error),
                "the PostgreSQL on localhost:5432 does not let this user in; starting a private \
                 one instead (set DATABASE_URL to use that server)"
            ),
        }
    }
    let private = PrivatePostgres::start(&config.data_dir.join("pg"))
        .await
        .context("starting a private PostgreSQL (set DATABASE_URL to use your own)")?;
    Ok((private.url.clone(), Some(private)))
}

async fn run_on(
    config: &DevConfig,
    database_url: &str,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let database = prepare_database(database_url).await?;
    let (s3, storage_config) = start_s3(config).await?;
    let (mut ctx, admin_token) = dev_context(config, &database, &storage_config).await?;
    let (node_id, spool_dir, rtmp_addr) =
        start_ingest(config, &mut ctx, database_url, &shutdown).await?;
    let listener = std::net::TcpListener::bind(config.http.addr)
        .with_context(|| format!("cannot listen on {} (VIDQ_HTTP_ADDR)", config.http.addr))?;
    // The worker runs in this process, with no health listener of its own: the API's
    // `/metrics` serves its families.
    let worker_health =
        std::sync::Arc::new(crate::telemetry::worker_health::WorkerHealth::default());
    ctx.in_process_worker = Some(crate::app::InProcessWorker {
        health: worker_health.clone(),
        slots: config.queue.slots,
    });
    let storage = ctx.storage.clone();
    let page_key = ctx.page_key.clone().unwrap_or_default();
    let server = crate::http::serve_with(listener, ctx, config.http.limits(), shutdown.clone())?;
    let worker = super::worker::run_with(
        database_url,
        &config.queue,
        &config.media,
        storage.clone(),
        worker_health,
        shutdown.clone(),
    );
    let mut relay_args = config.relay.clone();
    relay_args.webhooks.allow_private = true;
    let relay = super::relay::run_with(database_url, &relay_args, shutdown.clone());
    let sweeper = super::sweeper::run_with(
        database_url,
        &config.sweeper,
        config.live,
        super::sweeper::SweeperNode {
            node_id,
            spool_dir: spool_dir.clone(),
            health_listen: None,
        },
        storage,
        shutdown,
    );
    leave_for_scripts(&config.data_dir, &page_key, database_url)
        .context("writing the API key and database URL under the data directory")?;
    print_banner(
        config,
        &admin_token,
        &page_key,
        rtmp_addr,
        &s3,
        &spool_dir,
        database_url,
    );
    let (served, worked, relayed, swept) = tokio::join!(server, worker, relay, sweeper);
    served?;
    worked?;
    relayed?;
    swept?;
    s3.stop().await;
    tracing::info!("vidq dev stopped");
    Ok(())
}

/// The node's uploads and live streams through vidq: the spool, the ingest listener and
/// RTMP, serving; returns the node's id, its spool and where RTMP listens.
async fn start_ingest(
    config: &DevConfig,
    ctx: &mut crate::app::AppContext,
    database_url: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<(String, std::path::PathBuf, Option<std::net::SocketAddr>)> {
    let node = super::api::NodeSettings {
        node_id: super::spool_node(config.queue.node_id.as_deref()),
        spool_dir: config.spool.dir_or(config.data_dir.join("spool")),
        ingest: &config.ingest,
        rtmp: &config.rtmp,
        live: config.live,
    };
    let (node_id, spool_dir) = (node.node_id.clone(), node.spool_dir.clone());
    let listeners = super::api::attach_ingest(ctx, node, database_url, shutdown).await?;
    let rtmp_addr = listeners.rtmp_addr()?;
    ctx.storage
        .ensure_bucket()
        .await
        .context("creating the bucket in the embedded S3")?;
    // Detached: `vidq dev` is one developer's machine, and its streams end with it.
    drop(
        super::api::serve_ingest(
            listeners,
            ctx,
            &config.rtmp,
            &config.http.limits(),
            shutdown,
        )
        .await?,
    );
    Ok((node_id, spool_dir, rtmp_addr))
}

/// Creates the database if it is missing and applies the migrations.
async fn prepare_database(database_url: &str) -> anyhow::Result<DatabaseConfig> {
    if db::provision::create_database_if_missing(database_url)
        .await
        .context("creating the database (DATABASE_URL); is PostgreSQL running?")?
    {
        tracing::info!("created the database");
    }
    let database = DatabaseConfig {
        url: Secret::new(database_url.to_owned()),
        pool_size: 10,
    };
    super::api::migrate(&database).await?;
    Ok(database)
}

/// Starts the embedded S3 server over `<data dir>/s3`; the storage settings that reach it.
async fn start_s3(config: &DevConfig) -> anyhow::Result<(EmbeddedS3, StorageConfig)> {
    let listener = tokio::net::TcpListener::bind(config.s3_addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} for the embedded S3 (VIDQ_DEV_S3_ADDR)",
                config.s3_addr
            )
        })?;
    let s3 = EmbeddedS3::start(
        &config.data_dir.join("s3"),
        listener,
        DEV_ACCESS_KEY,
        DEV_SECRET_KEY,
    )?;
    let storage = StorageConfig {
        endpoint: Some(Url::parse(&s3.endpoint())?),
        public_endpoint: None,
        bucket: DEV_BUCKET.to_owned(),
        prefix: String::new(),
        region: "us-east-1".to_owned(),
        force_path_style: true,
        ca: None,
        timeouts: Default::default(),
    };
    Ok((s3, storage))
}

/// The user whose key `vidq dev` fills into its upload page.
pub const PAGE_USER: &str = "vidq-dev";

/// The operator token of this run: the one given, or one made now (and printed).
enum AdminToken {
    Given,
    Made(String),
}

/// The API's context as a laptop wants it: private webhook destinations allowed, a
/// playback key of its own unless one is given, and the dashboard on.
async fn dev_context(
    config: &DevConfig,
    database: &DatabaseConfig,
    storage: &StorageConfig,
) -> anyhow::Result<(crate::app::AppContext, AdminToken)> {
    let playback = crate::app::playback::PlaybackSettings::from_args(&config.playback)
        .context("VIDQ_PLAYBACK_SECRET (--playback-secret)")?;
    let mut ctx =
        super::api::context(database, storage, &config.upload, Some(dev_credentials())).await?;
    // On a laptop the receiver is on this machine: private destinations are allowed.
    ctx.webhooks.allow_private = true;
    // One API node: a generated playback key is fine unless one is given.
    ctx.playback = playback;
    // A laptop gets the dashboard: with no token given, one is made for this run and printed.
    let mut admin = config.admin.clone();
    let token = match &admin.admin_token {
        Some(_) => AdminToken::Given,
        None => {
            let made = crate::domain::api_key::ApiKey::generate()
                .reveal()
                .to_owned();
            admin.admin_token = Some(Secret::new(made.clone()));
            AdminToken::Made(made)
        }
    };
    ctx.operators =
        crate::app::operators::OperatorAccess::from_args(&admin).map_err(anyhow::Error::msg)?;
    // The upload page comes with a key: a new one each run for the same user, whose videos
    // of earlier runs it lists.
    let page_key = crate::app::users::fresh_key_for(&ctx.db, PAGE_USER)
        .await
        .context("making the upload page's API key")?;
    ctx.page_key = Some(page_key.reveal().to_owned());
    Ok((ctx, token))
}

/// Leaves this run's API key and database URL in the data directory (`api-key`,
/// `database-url`, readable by this user only), so a script, or the README's walk-through,
/// reads them rather than copying them from the banner.
fn leave_for_scripts(dir: &std::path::Path, key: &str, database_url: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    std::fs::create_dir_all(dir)?;
    for (name, text) in [("api-key", key), ("database-url", database_url)] {
        let path = dir.join(name);
        // Made readable by this user only, and kept so when it is there from a run before.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        writeln!(file, "{text}")?;
    }
    Ok(())
}

/// What is running where, and how to start.
fn print_banner(
    config: &DevConfig,
    admin_token: &AdminToken,
    page_key: &str,
    rtmp_addr: Option<std::net::SocketAddr>,
    s3: &EmbeddedS3,
    spool_dir: &std::path::Path,
    database_url: &str,
) {
    eprintln!(
        "\nvidq dev is running\n  upload page http://{api}/ (open it in a browser: upload, watch, go live)\n  API         http://{api}\n  API key     {page_key} (user {PAGE_USER}, new each run; in {key_file}, and filled in on the page)\n  dashboard   http://{api}/admin (log in with {token})\n  metrics     http://{api}/metrics\n  live ingest http://{ingest} (encoders PUT HLS here)\n  RTMP        {rtmp}\n  worker      {slots}, FFmpeg from PATH (its metrics: the API's /metrics)\n  relay       webhooks (private addresses allowed){nats}\n  sweeper     spool {spool}\n  S3          {s3} (bucket {DEV_BUCKET}, files in {root})\n  database    {db}\n\n\
         Another API key (in another terminal):\n  DATABASE_URL={db} cargo run -- user create --name me\n\
         Then follow the curl walk-through in README.md. Ctrl-C stops everything.\n",
        api = config.http.addr,
        token = match admin_token {
            AdminToken::Made(token) => format!("the token {token}, made for this run"),
            AdminToken::Given => "VIDQ_ADMIN_TOKEN".to_owned(),
        },
        slots = match config.queue.slots {
            1 => "1 slot".to_owned(),
            n => format!("{n} slots"),
        },
        ingest = config.ingest.ingest_addr,
        rtmp = match rtmp_addr {
            Some(addr) =>
                format!("rtmp://{addr}/live (OBS: this server, the stream key from POST /v1/live)"),
            None => "off (VIDQ_RTMP_ADDR=off)".to_owned(),
        },
        s3 = s3.endpoint(),
        root = config.data_dir.join("s3").display(),
        spool = spool_dir.display(),
        db = database_url,
        key_file = config.data_dir.join("api-key").display(),
        nats = match &config.relay.nats_url {
            Some(url) => format!(", NATS {url}"),
            None => String::new(),
        },
    );
}

/// The embedded S3 server's credentials.
pub fn dev_credentials() -> StaticCredentials {
    StaticCredentials {
        access_key_id: DEV_ACCESS_KEY.to_owned(),
        secret_access_key: Secret::new(DEV_SECRET_KEY),
    }
}
