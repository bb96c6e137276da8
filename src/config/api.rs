//! Settings of the `api` role: where it listens and the limits it enforces, the upload
//! contract, playback URLs, webhooks and the operator dashboard.

use std::net::SocketAddr;

use clap::Args;
use url::Url;

use super::ingest::{IngestArgs, LiveArgs, RtmpArgs, SpoolArgs};
use super::shared::{DatabaseConfig, Secret, StorageConfig};

/// Where the HTTP API listens.
#[derive(Debug, Clone, Args)]
pub struct HttpConfig {
    /// Address and port the HTTP API binds to.
    #[arg(
        long = "http-addr",
        env = "VIDQ_HTTP_ADDR",
        value_name = "ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub addr: SocketAddr,

    /// A request body that sends less than 1 KiB in this long is answered 408 and its
    /// connection closed, in seconds, on the API port and the live ingest listener alike. An
    /// idle limit, not a total one: a large body on a slow link that keeps moving is not cut.
    #[arg(long = "http-body-idle-secs", env = "VIDQ_HTTP_BODY_IDLE_SECS", value_name = "SECS",
          default_value_t = HttpLimits::default().body_idle.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_idle_secs: u64,

    /// Most connections one client address may hold open, on the API port (requests on the
    /// ones beyond are answered 429 and those connections closed) and on the live ingest
    /// listener (the ones beyond are closed as they open), each counted on its own.
    #[arg(long = "http-max-connections-per-ip", env = "VIDQ_HTTP_MAX_CONNECTIONS_PER_IP", value_name = "N",
          default_value_t = HttpLimits::default().max_connections_per_ip,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections_per_ip: u32,

    /// Origins a browser may call `/v1` from (CORS), comma-separated, or `*` for any. The
    /// API authenticates by the `Authorization` header, never by cookie, so cross-origin
    /// calls never carry credentials whatever this says. Empty: none.
    #[arg(
        long = "cors-allow-origins",
        env = "VIDQ_CORS_ALLOW_ORIGINS",
        value_name = "ORIGINS",
        default_value = "*"
    )]
    pub cors_allow_origins: CorsOrigins,
}

impl HttpConfig {
    /// The limits the server enforces.
    pub fn limits(&self) -> HttpLimits {
        HttpLimits {
            body_idle: std::time::Duration::from_secs(self.body_idle_secs),
            max_connections_per_ip: self.max_connections_per_ip,
            cors: self.cors_allow_origins.clone(),
        }
    }
}

/// What the HTTP server allows one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// Longest a request body may send nothing.
    pub body_idle: std::time::Duration,
    /// Most open connections per client address.
    pub max_connections_per_ip: u32,
    /// Origins browsers may call from.
    pub cors: CorsOrigins,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            body_idle: std::time::Duration::from_secs(15),
            max_connections_per_ip: 256,
            cors: CorsOrigins::Any,
        }
    }
}

/// `VIDQ_CORS_ALLOW_ORIGINS`: any origin, or a list (possibly empty) of exact origins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorsOrigins {
    /// `*`.
    Any,
    /// Exactly these `scheme://host[:port]` origins.
    Listed(Vec<String>),
}

impl CorsOrigins {
    /// Whether a browser page at `origin` may call.
    pub fn allows(&self, origin: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Listed(origins) => origins.iter().any(|o| o == origin),
        }
    }
}

impl std::str::FromStr for CorsOrigins {
    type Err = String;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        if raw.trim() == "*" {
            return Ok(Self::Any);
        }
        let mut origins = Vec::new();
        for origin in raw.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let url = Url::parse(origin).map_err(|_| format!("{origin:?} is not an origin"))?;
            let bare = matches!(url.scheme(), "http" | "https")
                && url.path() == "/"
                && !origin.ends_with('/')
                && url.query().is_none()
                && url.username().is_empty();
            if !bare {
                return Err(format!(
                    "{origin:?} is not an origin: write scheme://host[:port], no path"
                ));
            }
            origins.push(origin.to_owned());
        }
        Ok(Self::Listed(origins))
    }
}

/// `VIDQ_CONFIRM_COMMITTERS` unless set: two, so that a batch waiting on a lock (a user
/// deletion's last step) does not hold up every confirm of the node. One measured about the
/// same (within this machine's noise) and more measured slower: each committer's batch then
/// shrinks, and more statements share the same two cores.
pub const DEFAULT_CONFIRM_COMMITTERS: u16 = 2;

/// Limits and lifetimes of the upload contract handed to clients.
#[derive(Debug, Clone, Args)]
pub struct UploadConfig {
    /// Largest original a client may declare, in bytes (default 5 GiB).
    #[arg(
        long = "max-upload-bytes",
        env = "VIDQ_MAX_UPLOAD_BYTES",
        value_name = "BYTES",
        default_value_t = 5 * 1024 * 1024 * 1024,
        value_parser = clap::value_parser!(u64).range(1..=5 * 1024 * 1024 * 1024 * 1024)
    )]
    pub max_upload_bytes: u64,

    /// How long a presigned upload URL stays valid, in seconds (S3 allows at most 7 days).
    #[arg(
        long = "upload-url-ttl-secs",
        env = "VIDQ_UPLOAD_URL_TTL_SECS",
        value_name = "SECS",
        default_value_t = 3600,
        value_parser = clap::value_parser!(u64).range(60..=604_800)
    )]
    pub upload_url_ttl_secs: u64,

    /// Most confirms committed together in one transaction (1 to 1000; 1 commits each on
    /// its own). Confirms that arrive while the committers are busy wait and go together;
    /// each stays atomic. Nothing waits for a batch to fill.
    #[arg(
        long = "confirm-batch-max",
        env = "VIDQ_CONFIRM_BATCH_MAX",
        value_name = "N",
        default_value_t = 64,
        value_parser = clap::value_parser!(u16).range(1..=1000)
    )]
    pub confirm_batch_max: u16,

    /// Confirm transactions in flight at once (1 to 64), each on a pooled connection.
    #[arg(
        long = "confirm-committers",
        env = "VIDQ_CONFIRM_COMMITTERS",
        value_name = "N",
        default_value_t = DEFAULT_CONFIRM_COMMITTERS,
        value_parser = clap::value_parser!(u16).range(1..=64)
    )]
    pub confirm_committers: u16,

    /// How long playback URLs stay valid, in seconds (60 to 604800): the `hls_url` token
    /// and the presigned MP4, thumbnail and segment URLs.
    #[arg(
        long = "playback-url-ttl-secs",
        env = "VIDQ_PLAYBACK_URL_TTL_SECS",
        value_name = "SECS",
        default_value_t = 3600,
        value_parser = clap::value_parser!(u64).range(60..=604_800)
    )]
    pub playback_url_ttl_secs: u64,

    /// Most unfinished uploads one key may hold (receiving, or not yet confirmed); past it,
    /// creating another answers 429 `too_many_open_uploads`.
    #[arg(
        long = "max-open-uploads-per-user",
        env = "VIDQ_MAX_OPEN_UPLOADS_PER_USER",
        value_name = "N",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..=1_000_000)
    )]
    pub max_open_uploads_per_user: u32,

    /// Most live recordings one key may have open (waiting, live or ending); past it,
    /// creating another answers 429 `too_many_open_recordings`.
    #[arg(
        long = "max-open-recordings-per-user",
        env = "VIDQ_MAX_OPEN_RECORDINGS_PER_USER",
        value_name = "N",
        default_value_t = 20,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub max_open_recordings_per_user: u32,
}

/// How players reach a ready video's outputs.
#[derive(Debug, Clone, Default, Args)]
pub struct PlaybackArgs {
    /// Public base URL of the bucket, or of a CDN in front of it, under which every object
    /// is readable as `{base}/{key}` (e.g. `https://media.example.com`). When set, playback
    /// URLs are plain URLs under it; unset, the bucket is private: `hls_url` points at vidq,
    /// which serves the playlists with presigned segment URLs, and the MP4 and thumbnail URLs
    /// are presigned.
    #[arg(
        long = "public-base-url",
        env = "VIDQ_PUBLIC_BASE_URL",
        value_name = "URL",
        value_parser = parse_public_base_url
    )]
    pub public_base_url: Option<Url>,

    /// Key that signs the playback tokens in `hls_url` (at least 32 bytes, e.g.
    /// `openssl rand -hex 32`). Every API node must have the same one, or a player sent to
    /// another node is refused. Unset, each process generates its own at start-up: right for
    /// `vidq dev` and a single API node, but its tokens die with the process.
    #[arg(
        long = "playback-secret",
        env = "VIDQ_PLAYBACK_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    // Checked at start-up, not by clap: clap's refusal would print the value.
    pub secret: Option<Secret>,
}

fn parse_public_base_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "http" | "https") || url.query().is_some() {
        return Err("an http(s) URL without a query, e.g. https://media.example.com".to_owned());
    }
    Ok(url)
}

/// Where webhooks may point; the API checks at registration, the relay at every connection.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct WebhookArgs {
    /// Allow webhook URLs that resolve to loopback, link-local or private addresses. Off by
    /// default: an uploader must not be able to make vidq POST into your own network. Turn on
    /// for tests, `vidq dev`, or receivers on a network you trust.
    #[arg(
        long = "webhook-allow-private",
        env = "VIDQ_WEBHOOK_ALLOW_PRIVATE",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue
    )]
    pub allow_private: bool,
}

/// Who may open the operator dashboard (`/admin`).
#[derive(Debug, Clone, Default, Args)]
pub struct AdminArgs {
    /// Operator token: logging in to `/admin` with it opens the dashboard (queue, nodes,
    /// deliveries, sweepers, live recordings; retry and cancel jobs). At least 16
    /// characters. Unset, the dashboard is off (404) unless a user was made with `vidq user
    /// create --admin`, whose API key then logs in instead.
    #[arg(
        long = "admin-token",
        env = "VIDQ_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    // Checked at start-up, not by clap: clap's refusal would print the value.
    pub admin_token: Option<Secret>,
    /// The load balancers and reverse proxies in front of the API, as CIDR blocks separated
    /// by commas (e.g. `10.0.0.0/8,127.0.0.1`). A request from one of them is counted (failed
    /// logins) under the right-most `X-Forwarded-For` address that is not one of them.
    /// Unset, the header is ignored and the socket's peer counts: behind a proxy, every
    /// client would then share its address, so set this there.
    #[arg(
        long = "trusted-proxies",
        env = "VIDQ_TRUSTED_PROXIES",
        value_name = "CIDRS",
        value_delimiter = ',',
        value_parser = clap::value_parser!(crate::domain::client_address::Cidr)
    )]
    pub trusted_proxies: Vec<crate::domain::client_address::Cidr>,
}

/// Settings of the `api` role.
#[derive(Debug, Clone, Args)]
// Flattened groups are documented on their own types.
#[allow(missing_docs)]
pub struct ApiConfig {
    #[command(flatten)]
    pub database: DatabaseConfig,
    #[command(flatten)]
    pub storage: StorageConfig,
    #[command(flatten)]
    pub http: HttpConfig,
    #[command(flatten)]
    pub upload: UploadConfig,
    #[command(flatten)]
    pub webhooks: WebhookArgs,
    #[command(flatten)]
    pub playback: PlaybackArgs,
    #[command(flatten)]
    pub spool: SpoolArgs,
    #[command(flatten)]
    pub ingest: IngestArgs,
    #[command(flatten)]
    pub rtmp: RtmpArgs,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    /// This node's name: uploads through vidq are spooled here under it, and the sweeper
    /// run with the same name and `VIDQ_SPOOL_DIR` lands them in S3. Default: the host name.
    #[arg(long = "node-id", env = "VIDQ_NODE_ID", value_name = "NAME")]
    pub node_id: Option<String>,
    /// Do not apply pending migrations at start-up (run `vidq migrate` separately).
    #[arg(long = "no-migrate", env = "VIDQ_NO_MIGRATE", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::SetTrue)]
    pub no_migrate: bool,
    /// `/readyz` answers 503 unless S3 answers too. Off by default: the node starts and
    /// stays ready through an S3 outage, since uploads through vidq, live ingest, status
    /// reads and the event feed need only the spool and PostgreSQL.
    #[arg(long = "ready-requires-storage", env = "VIDQ_READY_REQUIRES_STORAGE", value_name = "BOOL",
          default_value_t = false, action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub ready_requires_storage: bool,
}
