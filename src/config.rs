//! One typed configuration, read from command-line flags and `VIDQ_*` environment variables.
//!
//! Every setting is listed here with its default; `vidq <role> --help` prints them with the
//! variable that sets each. Configuration is passed to the code that needs it, never global.
//! Secrets (the database URL, which may hold a password) are wrapped so they never reach a
//! log line or a `Debug` print.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use clap::{Args, Parser};
use url::Url;

use crate::domain::retry::RetrySchedule;

/// A value that must never be printed: `Debug` and `Display` show `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Where the database is and how many connections this process may hold.
#[derive(Debug, Clone, Args)]
pub struct DatabaseConfig {
    /// PostgreSQL URL, e.g. `postgres://vidq:secret@db.internal/vidq`. A URL without a user
    /// connects as the current OS user, as psql does.
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub url: Secret,

    /// Maximum connections in this process's pool.
    #[arg(
        long = "db-pool-size",
        env = "VIDQ_DB_POOL_SIZE",
        default_value_t = 10,
        value_parser = clap::value_parser!(u32).range(1..=200)
    )]
    pub pool_size: u32,
}

/// The database URL alone, for the roles whose pool size is fixed in code (worker, relay).
#[derive(Debug, Clone, Args)]
pub struct DatabaseUrl {
    /// PostgreSQL URL.
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub url: Secret,
}

/// The S3 bucket that holds originals and encoded outputs.
///
/// Credentials come from the standard AWS chain: `AWS_ACCESS_KEY_ID` and
/// `AWS_SECRET_ACCESS_KEY`, a profile, or an instance role.
#[derive(Debug, Clone, Args)]
pub struct StorageConfig {
    /// S3 endpoint URL (MinIO, Ceph, R2...). Unset means AWS S3 itself.
    #[arg(long = "s3-endpoint", env = "VIDQ_S3_ENDPOINT", value_name = "URL")]
    pub endpoint: Option<Url>,

    /// Endpoint written into presigned URLs handed to clients, when clients reach S3 at
    /// another address than vidq does (e.g. `http://localhost:9000` outside Docker while
    /// vidq uses `http://minio:9000`). Defaults to the S3 endpoint.
    #[arg(
        long = "s3-public-endpoint",
        env = "VIDQ_S3_PUBLIC_ENDPOINT",
        value_name = "URL"
    )]
    pub public_endpoint: Option<Url>,

    /// Bucket name (3-63 characters: lowercase letters, digits, dots and hyphens).
    #[arg(long = "s3-bucket", env = "VIDQ_S3_BUCKET", value_name = "BUCKET", value_parser = parse_bucket)]
    pub bucket: String,

    /// S3 region.
    #[arg(
        long = "s3-region",
        env = "VIDQ_S3_REGION",
        value_name = "REGION",
        default_value = "us-east-1"
    )]
    pub region: String,

    /// Address buckets as `endpoint/bucket/key` instead of `bucket.endpoint/key`
    /// (MinIO and most S3-compatible servers need this).
    #[arg(
        long = "s3-force-path-style",
        env = "VIDQ_S3_FORCE_PATH_STYLE",
        value_name = "BOOL",
        default_value_t = false,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub force_path_style: bool,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub timeouts: S3Timeouts,
}

/// How long vidq waits on S3. Without these, an S3 that accepts connections and never
/// answers held `/readyz`, confirm, deletes and `vidq api`'s start-up for minutes.
///
/// Small calls (HEAD, DELETE, a listing page, multipart bookkeeping) are bounded as a whole;
/// transfers (a PUT, one multipart part, a GET's body) are bounded per attempt and cut when
/// they stall, so a large file on a slow link is not cut by a limit meant for a HEAD.
#[derive(Debug, Clone, Copy, Args)]
pub struct S3Timeouts {
    /// Longest wait for a TCP (and TLS) connection to S3, in milliseconds.
    #[arg(long = "s3-connect-timeout-ms", env = "VIDQ_S3_CONNECT_TIMEOUT_MS", value_name = "MS",
          default_value_t = S3Timeouts::DEFAULT.connect_ms,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub connect_ms: u64,
    /// Longest wait for the first byte of S3's answer to a small call or a GET, per try,
    /// in seconds.
    #[arg(long = "s3-read-timeout-secs", env = "VIDQ_S3_READ_TIMEOUT_SECS", value_name = "SECS",
          default_value_t = S3Timeouts::DEFAULT.read_secs,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub read_secs: u64,
    /// Longest a small call may take with its retries, in seconds.
    #[arg(long = "s3-operation-timeout-secs", env = "VIDQ_S3_OPERATION_TIMEOUT_SECS", value_name = "SECS",
          default_value_t = S3Timeouts::DEFAULT.operation_secs,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub operation_secs: u64,
    /// Longest one transfer try (a PUT of up to 8 MiB or one 8 MiB part) may take, in
    /// seconds.
    #[arg(long = "s3-transfer-timeout-secs", env = "VIDQ_S3_TRANSFER_TIMEOUT_SECS", value_name = "SECS",
          default_value_t = S3Timeouts::DEFAULT.transfer_secs,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub transfer_secs: u64,
    /// A transfer that moves (on average) less than a byte a second for this long is cut,
    /// in seconds.
    #[arg(long = "s3-stall-secs", env = "VIDQ_S3_STALL_SECS", value_name = "SECS",
          default_value_t = S3Timeouts::DEFAULT.stall_secs,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub stall_secs: u64,
}

impl S3Timeouts {
    /// The defaults: connect 3 s, first byte 10 s, small call 30 s, transfer try 10 min,
    /// stall 20 s.
    pub const DEFAULT: Self = Self {
        connect_ms: 3_000,
        read_secs: 10,
        operation_secs: 30,
        transfer_secs: 600,
        stall_secs: 20,
    };
}

impl Default for S3Timeouts {
    fn default() -> Self {
        Self::DEFAULT
    }
}

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

impl UploadConfig {
    /// How the API groups its confirms into transactions.
    pub fn batches(&self) -> crate::app::confirm_batch::BatchSettings {
        crate::app::confirm_batch::BatchSettings {
            max: usize::from(self.confirm_batch_max),
            committers: usize::from(self.confirm_committers),
        }
    }
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

/// How the media pipeline runs FFmpeg and what it accepts.
#[derive(Debug, Clone, Args)]
pub struct MediaArgs {
    /// The ffmpeg binary.
    #[arg(
        long = "ffmpeg",
        env = "VIDQ_FFMPEG",
        value_name = "PATH",
        default_value = "ffmpeg"
    )]
    pub ffmpeg: std::path::PathBuf,
    /// The ffprobe binary.
    #[arg(
        long = "ffprobe",
        env = "VIDQ_FFPROBE",
        value_name = "PATH",
        default_value = "ffprobe"
    )]
    pub ffprobe: std::path::PathBuf,
    /// Wall-clock limit of each FFmpeg call (probe, encode, thumbnail), in seconds.
    #[arg(long = "ffmpeg-timeout-secs", env = "VIDQ_FFMPEG_TIMEOUT_SECS", value_name = "SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub ffmpeg_timeout_secs: u64,
    /// Longest accepted video, in seconds.
    #[arg(long = "max-duration-secs", env = "VIDQ_MAX_DURATION_SECS", value_name = "SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub max_duration_secs: u64,
    /// Widest accepted frame (the long side, for portrait videos too).
    #[arg(long = "max-width", env = "VIDQ_MAX_WIDTH", value_name = "PX", default_value_t = 3840,
          value_parser = clap::value_parser!(i32).range(16..=16_384))]
    pub max_width: i32,
    /// Tallest accepted frame (the short side, for portrait videos too).
    #[arg(long = "max-height", env = "VIDQ_MAX_HEIGHT", value_name = "PX", default_value_t = 2160,
          value_parser = clap::value_parser!(i32).range(16..=16_384))]
    pub max_height: i32,
    /// Highest accepted frame rate.
    #[arg(
        long = "max-fps",
        env = "VIDQ_MAX_FPS",
        value_name = "FPS",
        default_value_t = 120.0
    )]
    pub max_fps: f64,
    /// Short sides of the HLS renditions, comma-separated (e.g. `1080,720,480`; default one
    /// rendition at 720p). The MP4 is made at the largest; rungs above the source are skipped.
    #[arg(long = "ladder", env = "VIDQ_LADDER", value_name = "HEIGHTS", value_delimiter = ',', default_value = "720",
          value_parser = clap::value_parser!(i32).range(16..=4320))]
    pub ladder: Vec<i32>,
    /// HLS segment length, in seconds.
    #[arg(long = "segment-secs", env = "VIDQ_SEGMENT_SECS", value_name = "SECS", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=60))]
    pub segment_secs: u32,
    /// Encoder threads per FFmpeg call (0 lets FFmpeg choose; 1 per core pinned).
    #[arg(
        long = "ffmpeg-threads",
        env = "VIDQ_FFMPEG_THREADS",
        value_name = "N",
        default_value_t = 0
    )]
    pub ffmpeg_threads: u32,
}

impl MediaArgs {
    /// The pipeline's configuration.
    pub fn to_media_config(&self) -> crate::adapters::ffmpeg::MediaConfig {
        crate::adapters::ffmpeg::MediaConfig {
            ffmpeg: self.ffmpeg.clone(),
            ffprobe: self.ffprobe.clone(),
            call_timeout: std::time::Duration::from_secs(self.ffmpeg_timeout_secs),
            limits: crate::domain::media::MediaLimits {
                max_duration_ms: i64::try_from(self.max_duration_secs * 1000).unwrap_or(i64::MAX),
                max_width: self.max_width,
                max_height: self.max_height,
                max_fps: self.max_fps,
            },
            ladder: self.ladder.clone(),
            segment_seconds: self.segment_secs,
            threads: self.ffmpeg_threads,
        }
    }
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

/// How a worker claims and paces jobs.
#[derive(Debug, Clone, Args)]
pub struct QueueArgs {
    /// Name written to each claim (`claimed_by`). Default: the host name.
    #[arg(long = "node-id", env = "VIDQ_NODE_ID", value_name = "NAME")]
    pub node_id: Option<String>,
    /// Jobs this process encodes at once (one FFmpeg per small node is the usual shape).
    /// With more than one, free slots are claimed in one statement, and results that
    /// finish at the same moment are committed READY in one transaction.
    #[arg(long, env = "VIDQ_SLOTS", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub slots: u32,
    /// Safety-net poll interval in milliseconds (NOTIFY wakes the worker sooner).
    #[arg(long = "poll-ms", env = "VIDQ_POLL_MS", value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub poll_ms: u64,
    /// Lease of a claim in seconds: a node that dies loses its job after this long.
    #[arg(long = "lease-secs", env = "VIDQ_LEASE_SECS", value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub lease_secs: u64,
    /// Lease renewal interval in seconds; 0 turns the heartbeat off (then set the lease to
    /// cover a whole attempt, e.g. 2100, as the seed did).
    #[arg(
        long = "heartbeat-secs",
        env = "VIDQ_HEARTBEAT_SECS",
        value_name = "SECS",
        default_value_t = 15
    )]
    pub heartbeat_secs: u64,
    /// Hard limit of one attempt in seconds (default 35 min = 3 FFmpeg calls x 10 min + 5 min S3).
    #[arg(long = "deadline-secs", env = "VIDQ_DEADLINE_SECS", value_name = "SECS", default_value_t = 2100,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub deadline_secs: u64,
    /// Attempts in a row whose media tools could not run (a missing library, a crash, a tool
    /// that cannot be executed: `tool_failed`) after which this worker stops claiming, hands
    /// such a claim back with its attempt restored and reports itself unhealthy, until its
    /// tools work again; 0 never stops.
    #[arg(
        long = "worker-tool-failures",
        env = "VIDQ_WORKER_TOOL_FAILURES",
        value_name = "N",
        default_value_t = 3
    )]
    pub tool_failures: u32,
    /// While its tools fail, how often the worker tries them again, in seconds.
    #[arg(long = "worker-tool-recheck-secs", env = "VIDQ_WORKER_TOOL_RECHECK_SECS", value_name = "SECS",
          default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub tool_recheck_secs: u64,
    /// Scratch space for originals and outputs (one directory per attempt, removed after).
    #[arg(long = "work-dir", env = "VIDQ_WORK_DIR", value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

/// Settings of the `worker` role.
#[derive(Debug, Clone, Args)]
#[allow(missing_docs)] // flattened groups are documented on their own types
pub struct WorkerConfig {
    #[command(flatten)]
    pub database: DatabaseUrl,
    #[command(flatten)]
    pub queue: QueueArgs,
    /// Serve `/healthz` and `/metrics` on this loopback address (e.g. 127.0.0.1:9091). Off
    /// by default; only loopback addresses are accepted.
    #[arg(long = "health-listen", env = "VIDQ_HEALTH_LISTEN", value_name = "ADDR",
          value_parser = crate::http::health_listener::loopback_addr)]
    pub health_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub storage: StorageConfig,
    #[command(flatten)]
    pub media: MediaArgs,
}

/// How a relay claims, sends and retries.
#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    /// Name written to each claim and logged try. Default: host name and process id.
    #[arg(long = "relay-id", env = "VIDQ_RELAY_ID", value_name = "NAME")]
    pub relay_id: Option<String>,
    /// Safety-net poll interval in milliseconds (NOTIFY wakes the relay sooner).
    #[arg(long = "relay-poll-ms", env = "VIDQ_RELAY_POLL_MS", value_name = "MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub relay_poll_ms: u64,
    /// Lease of a claimed delivery in seconds: if this relay dies mid-send, another sends
    /// the delivery again (same event id) after this long. At least twice the webhook timeout.
    #[arg(long = "relay-lease-secs", env = "VIDQ_RELAY_LEASE_SECS", value_name = "SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub relay_lease_secs: u64,
    /// Most deliveries sent at once.
    #[arg(long = "relay-concurrency", env = "VIDQ_RELAY_CONCURRENCY", value_name = "N", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub concurrency: u32,
    /// Most outbox rows routed, and deliveries claimed, per statement.
    #[arg(long = "relay-batch", env = "VIDQ_RELAY_BATCH", value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch: u32,
    /// How long one webhook try may take, in milliseconds (connect, send, answer).
    #[arg(long = "webhook-timeout-ms", env = "VIDQ_WEBHOOK_TIMEOUT_MS", value_name = "MS", default_value_t = 15_000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub webhook_timeout_ms: u64,
    /// Delay before each try, comma-separated (ms, s, m, h); a delivery is exhausted when
    /// all are used. Each delay gets ±20% jitter; a longer Retry-After is honoured.
    #[arg(long = "retry-schedule", env = "VIDQ_WEBHOOK_RETRY_SCHEDULE", value_name = "DELAYS",
          default_value = crate::domain::retry::DEFAULT_SCHEDULE)]
    pub schedule: RetrySchedule,
    /// Hours delivered events are kept (the pull feed and resends reach back this far).
    #[arg(long = "retention-hours", env = "VIDQ_EVENT_RETENTION_HOURS", value_name = "HOURS", default_value_t = 168,
          value_parser = clap::value_parser!(u64).range(1..=87_600))]
    pub retention_hours: u64,
    /// NATS server URL; when set, every event is also published to JetStream.
    #[arg(long = "nats-url", env = "VIDQ_NATS_URL", value_name = "URL")]
    pub nats_url: Option<String>,
    /// Subject prefix: events go to `<prefix>.video.ready` and so on.
    #[arg(
        long = "nats-subject-prefix",
        env = "VIDQ_NATS_SUBJECT_PREFIX",
        value_name = "PREFIX",
        default_value = "vidq"
    )]
    pub nats_subject_prefix: String,
    /// JetStream stream that captures `<prefix>.>` (created, with a 2-minute duplicate
    /// window, if missing).
    #[arg(
        long = "nats-stream",
        env = "VIDQ_NATS_STREAM",
        value_name = "NAME",
        default_value = "VIDQ"
    )]
    pub nats_stream: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub webhooks: WebhookArgs,
}

/// Settings of the `relay` role.
#[derive(Debug, Clone, Args)]
pub struct RelayConfig {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub database: DatabaseUrl,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub relay: RelayArgs,
    /// Serve `GET /healthz` and `GET /metrics` (the outbox backlog, deliveries by outcome,
    /// commit-to-delivery lag) on this loopback address, e.g. `127.0.0.1:9093`.
    #[arg(long = "health-listen", env = "VIDQ_HEALTH_LISTEN", value_name = "ADDR",
          value_parser = crate::http::health_listener::loopback_addr)]
    pub health_listen: Option<SocketAddr>,
}

/// How the upload sweeper pages, queues, retries and protects S3 (DESIGN, "Upload
/// recovery"). The database row is the ledger; the queue is only a throttle.
#[derive(Debug, Clone, Args)]
pub struct SweeperArgs {
    /// Capacity of the in-memory queue between the ledger reader and the upload workers; a
    /// full queue leaves rows for a later round (counted as saturation).
    #[arg(long = "sweeper-queue", env = "VIDQ_SWEEPER_QUEUE", value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub queue: u32,
    /// Upload workers (concurrent PUTs).
    #[arg(long = "sweeper-workers", env = "VIDQ_SWEEPER_WORKERS", value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Pending rows read per round through the forward cursor.
    #[arg(long = "sweeper-page", env = "VIDQ_SWEEPER_PAGE", value_name = "N",
          default_value_t = crate::domain::sweep::DEFAULT_PAGE,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub page: u32,
    /// Pause between rounds, in milliseconds (a round that read a full page and queued all
    /// of it is followed at once).
    #[arg(long = "sweeper-interval-ms", env = "VIDQ_SWEEPER_INTERVAL_MS", value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub interval_ms: u64,
    /// How long a sweeper holds a row it queued (its claim); a sweeper that dies loses its
    /// rows to the others after this long. Longer than one PUT of the largest upload.
    #[arg(long = "sweeper-claim-secs", env = "VIDQ_SWEEPER_CLAIM_SECS", value_name = "SECS", default_value_t = 900,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub claim_secs: u64,
    /// Consecutive S3 failures that open the circuit breaker (PUTs stop).
    #[arg(long = "sweeper-breaker-failures", env = "VIDQ_SWEEPER_BREAKER_FAILURES", value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub breaker_failures: u32,
    /// How often the orphan pass runs, in seconds (0: never): objects no live row owns
    /// (non-live attempt prefixes, deleted videos, lapsed uploads) are deleted and dead
    /// attempts' pending output rows forgotten. One sweeper of the cluster runs it at a time.
    #[arg(long = "sweeper-orphan-interval-secs", env = "VIDQ_SWEEPER_ORPHAN_INTERVAL_SECS", value_name = "SECS",
          default_value_t = 900, value_parser = clap::value_parser!(u64).range(0..=604_800))]
    pub orphan_interval_secs: u64,
    /// The orphan pass leaves objects and rows younger than this alone, in seconds: they may
    /// be uploads or encodes in flight.
    #[arg(long = "sweeper-orphan-grace-secs", env = "VIDQ_SWEEPER_ORPHAN_GRACE_SECS", value_name = "SECS",
          default_value_t = 3600, value_parser = clap::value_parser!(u64).range(60..=31_536_000))]
    pub orphan_grace_secs: u64,
    /// How long the breaker stays open before one probe PUT, in milliseconds.
    #[arg(long = "sweeper-breaker-cooldown-ms", env = "VIDQ_SWEEPER_BREAKER_COOLDOWN_MS", value_name = "MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub breaker_cooldown_ms: u64,
}

/// Where `vidq dev` gets its PostgreSQL when no DATABASE_URL is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DevPostgres {
    /// The server on localhost:5432 if one answers, else a private one.
    Auto,
    /// Always a private server under the data directory.
    Private,
}

/// How log lines are written (every role and command).
#[derive(Debug, Clone, Copy, Args)]
pub struct LogArgs {
    /// `text`: one human-readable line per event (ANSI colours on a terminal); `json`: one
    /// JSON object per line (`timestamp`, `level`, `target`, `fields`, `span`, `spans`) for
    /// a log shipper. The filter is `RUST_LOG` (default `info`).
    #[arg(long = "log-format", env = "VIDQ_LOG_FORMAT", value_name = "FORMAT", global = true,
          value_enum, default_value_t = LogFormat::Text)]
    pub format: LogFormat,
}

/// See [`LogArgs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Where a node keeps the bytes of uploads through vidq until the ledger says they are in S3.
#[derive(Debug, Clone, Args)]
pub struct SpoolArgs {
    /// The allowed root of spool files: uploads through vidq (tus, the single PUT) are
    /// written here by the API and PUT to S3 from here by the sweeper of the same node. A
    /// row whose path leaves it (absolute, `..`, a symlink out) is rejected, never read or
    /// PUT. Default: `./spool` (`vidq dev`: `<VIDQ_DEV_DATA_DIR>/spool`).
    #[arg(long = "spool-dir", env = "VIDQ_SPOOL_DIR", value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
}

impl SpoolArgs {
    /// The configured root, or `default`.
    pub fn dir_or(&self, default: impl Into<PathBuf>) -> PathBuf {
        self.spool_dir.clone().unwrap_or_else(|| default.into())
    }
}

/// When a live recording ends by itself, and how long after its end files still count.
#[derive(Debug, Clone, Copy, Args)]
pub struct LiveArgs {
    /// A live recording with no file or playlist for this long ends (`idle`), in seconds.
    #[arg(long = "live-idle-secs", env = "VIDQ_LIVE_IDLE_SECS", value_name = "SECS",
          default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub idle_secs: u64,
    /// After a live recording ends, files still arriving for this long count; later ones,
    /// and segments numbered past the final playlist, are excluded (seconds).
    #[arg(long = "live-grace-secs", env = "VIDQ_LIVE_GRACE_SECS", value_name = "SECS",
          default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3_600))]
    pub grace_secs: u64,
    /// A live recording created and never streamed to for this long ends (`expired`) and
    /// then fails (nothing playable), in seconds: it leaves the dashboard and the
    /// open-recordings gauge, and its ingest URL takes nothing more.
    #[arg(long = "live-waiting-ttl-secs", env = "VIDQ_LIVE_WAITING_TTL_SECS", value_name = "SECS",
          default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..=30 * 86_400))]
    pub waiting_ttl_secs: u64,
}

impl Default for LiveArgs {
    fn default() -> Self {
        Self {
            idle_secs: 30,
            grace_secs: 10,
            waiting_ttl_secs: 86_400,
        }
    }
}

/// Uploads through vidq (tus at `/v1/tus/`, `PUT /v1/uploads/{id}/content`).
#[derive(Debug, Clone, Args)]
pub struct IngestArgs {
    /// How long an upload through vidq may take to arrive, in seconds, from its creation
    /// (tus `Upload-Expires`); after that it is `expired`, its spool file removed, and its
    /// requests answer 410.
    #[arg(long = "resumable-ttl-secs", env = "VIDQ_RESUMABLE_TTL_SECS", value_name = "SECS",
          default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(60..=2_592_000))]
    pub resumable_ttl_secs: u64,
    /// Address of the live ingest listener (encoders PUT HLS to it; it reads every body to
    /// its end even when the encoder half-closes its connection, as FFmpeg does).
    #[arg(
        long = "ingest-addr",
        env = "VIDQ_INGEST_ADDR",
        value_name = "ADDR",
        default_value = "127.0.0.1:8081"
    )]
    pub ingest_addr: SocketAddr,
    /// The ingest listener's address as encoders reach it (`scheme://host[:port]`), when a
    /// proxy or another name is in front of it. Default: the host the client reached the API
    /// at, with the ingest listener's port.
    #[arg(
        long = "ingest-public-url",
        env = "VIDQ_INGEST_PUBLIC_URL",
        value_name = "URL"
    )]
    pub ingest_public_url: Option<Url>,
    /// Where tus uploads (and single PUTs) keep their bytes while they arrive. `spool`: this
    /// node's disk, PUT by its sweeper once whole; one node serves each upload (a load
    /// balancer needs affinity) and uploads go on while S3 is down. `s3`: an S3 multipart
    /// upload on the final key, with its offset and parts in the database; any API node
    /// serves any request (no affinity), and an upload outlives the node that began it.
    #[arg(long = "tus-store", env = "VIDQ_TUS_STORE", value_name = "STORE",
          default_value = "spool", value_parser = ["spool", "s3"])]
    pub tus_store: String,
    /// With the `s3` store: the size of each S3 part (all but a file's last), in bytes; at
    /// least S3's minimum of 5 MiB. A request holds at most one part's worth of buffers.
    #[arg(long = "tus-part-bytes", env = "VIDQ_TUS_PART_BYTES", value_name = "BYTES",
          default_value_t = 8 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(5 * 1024 * 1024..=5 * 1024 * 1024 * 1024))]
    pub tus_part_bytes: u64,
}

/// Where the RTMP listener accepts encoders (`VIDQ_RTMP_ADDR`): an address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtmpListen {
    /// No RTMP listener.
    Off,
    /// Listen here (port 0: any free port, which the recordings' `rtmp_url` then names).
    At(SocketAddr),
}

impl FromStr for RtmpListen {
    type Err = String;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        if raw.eq_ignore_ascii_case("off") {
            return Ok(Self::Off);
        }
        raw.parse().map(Self::At).map_err(|_| {
            format!("{raw:?}: an address such as 0.0.0.0:1935, or `off` for no RTMP listener")
        })
    }
}

/// RTMP ingest: encoders (OBS, Larix, hardware encoders, `ffmpeg -f flv`) publish to
/// `rtmp://{host}/live` with the recording's stream key as the stream name.
#[derive(Debug, Clone, Args)]
pub struct RtmpArgs {
    /// Address of the RTMP listener, or `off`. Each published stream runs one FFmpeg child
    /// that repackages it (`-c copy`, no re-encoding) into the recording's HLS files.
    #[arg(
        long = "rtmp-addr",
        env = "VIDQ_RTMP_ADDR",
        value_name = "ADDR|off",
        default_value = "127.0.0.1:1935"
    )]
    pub rtmp_addr: RtmpListen,
    /// The RTMP listener's address as encoders reach it (`rtmp://host[:port]`), when a proxy
    /// or another name is in front of it. Default: the host the client reached the API at,
    /// with the RTMP listener's port.
    #[arg(long = "rtmp-public-url", env = "VIDQ_RTMP_PUBLIC_URL", value_name = "URL",
          value_parser = parse_rtmp_public_url)]
    pub rtmp_public_url: Option<Url>,
    /// The ffmpeg binary that repackages each RTMP stream.
    #[arg(
        long = "rtmp-ffmpeg",
        env = "VIDQ_FFMPEG",
        value_name = "PATH",
        default_value = "ffmpeg"
    )]
    pub rtmp_ffmpeg: PathBuf,
}

impl Default for RtmpArgs {
    fn default() -> Self {
        Self {
            rtmp_addr: RtmpListen::At("127.0.0.1:1935".parse().expect("a valid address")),
            rtmp_public_url: None,
            rtmp_ffmpeg: PathBuf::from("ffmpeg"),
        }
    }
}

fn parse_rtmp_public_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| e.to_string())?;
    let bare = url.query().is_none() && matches!(url.path(), "" | "/");
    if !matches!(url.scheme(), "rtmp" | "rtmps") || !bare {
        return Err(
            "an rtmp:// URL without a path or query, e.g. rtmp://live.example.com".to_owned(),
        );
    }
    Ok(url)
}

impl IngestArgs {
    /// The chosen store.
    pub fn store(&self) -> crate::domain::upload::UploadStore {
        self.tus_store
            .parse()
            .expect("clap allows only the stores there are")
    }
}

impl Default for IngestArgs {
    fn default() -> Self {
        Self {
            resumable_ttl_secs: 86_400,
            ingest_addr: "127.0.0.1:8081".parse().expect("a valid address"),
            ingest_public_url: None,
            tus_store: "spool".to_owned(),
            tus_part_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Settings of the `sweeper` role.
#[derive(Debug, Clone, Args)]
#[allow(missing_docs)] // flattened groups are documented on their own types
pub struct SweeperConfig {
    #[command(flatten)]
    pub database: DatabaseUrl,
    /// This node's name: the sweeper re-drives only rows whose spool is on this node.
    /// Default: the host name.
    #[arg(long = "node-id", env = "VIDQ_NODE_ID", value_name = "NAME")]
    pub node_id: Option<String>,
    #[command(flatten)]
    pub spool: SpoolArgs,
    #[command(flatten)]
    pub sweeper: SweeperArgs,
    #[command(flatten)]
    pub live: LiveArgs,
    #[command(flatten)]
    pub storage: StorageConfig,
    /// Serve `/healthz` and `/metrics` (counters, queue, circuit breaker state) on this
    /// loopback address (e.g. 127.0.0.1:9092). Off by default; only loopback addresses are
    /// accepted.
    #[arg(long = "health-listen", env = "VIDQ_HEALTH_LISTEN", value_name = "ADDR",
          value_parser = crate::http::health_listener::loopback_addr)]
    pub health_listen: Option<SocketAddr>,
}

/// Settings of `vidq reconcile`.
#[derive(Debug, Clone, Args)]
#[allow(missing_docs)] // flattened groups are documented on their own types
pub struct ReconcileConfig {
    #[command(flatten)]
    pub database: DatabaseUrl,
    #[command(flatten)]
    pub storage: StorageConfig,
    /// Objects no row owns are called orphans only once they are this old (seconds, by
    /// their last-modified time): younger ones may be uploads or encodes in flight.
    #[arg(long = "grace-secs", env = "VIDQ_RECONCILE_GRACE_SECS", value_name = "SECS",
          default_value_t = 3600, value_parser = clap::value_parser!(u64).range(0..=31_536_000))]
    pub grace_secs: u64,
    /// Where this node's spool files are (`--fix` re-drives uploads through vidq whose
    /// spool file is still there). Default: `./spool`.
    #[arg(long = "spool-dir", env = "VIDQ_SPOOL_DIR", value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    /// Delete the orphans and re-drive the rows that can be re-driven.
    #[arg(long)]
    pub fix: bool,
    /// Print the report as one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Settings of `vidq dev`.
#[derive(Debug, Clone, Args)]
// Flattened groups are documented on their own types.
#[allow(missing_docs)]
pub struct DevConfig {
    /// PostgreSQL URL; the database is created if it does not exist. Unset: the server on
    /// localhost:5432 if one answers there (database `vidq`), else a private one (see
    /// `--postgres`).
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,

    /// Without DATABASE_URL: `auto` uses the server on localhost:5432 if one answers and
    /// otherwise starts a private one; `private` always starts a private server from the
    /// installed PostgreSQL (`initdb`/`pg_ctl` on the PATH or in /usr/lib/postgresql/*/bin)
    /// under `<VIDQ_DEV_DATA_DIR>/pg`, on a free loopback port, stopped when vidq dev exits.
    #[arg(long = "postgres", env = "VIDQ_DEV_POSTGRES", value_name = "MODE", value_enum,
          default_value_t = DevPostgres::Auto)]
    pub postgres: DevPostgres,

    #[command(flatten)]
    pub http: HttpConfig,

    /// Address of the embedded S3 server (presigned upload URLs point here).
    #[arg(
        long = "s3-addr",
        env = "VIDQ_DEV_S3_ADDR",
        value_name = "ADDR",
        default_value = "127.0.0.1:9000"
    )]
    pub s3_addr: SocketAddr,

    /// Directory for local state; objects live in `<dir>/s3/<bucket>/`.
    #[arg(
        long = "data-dir",
        env = "VIDQ_DEV_DATA_DIR",
        value_name = "DIR",
        default_value = "./.vidq-data"
    )]
    pub data_dir: PathBuf,

    #[command(flatten)]
    pub upload: UploadConfig,

    #[command(flatten)]
    pub playback: PlaybackArgs,

    #[command(flatten)]
    pub queue: QueueArgs,

    #[command(flatten)]
    pub media: MediaArgs,

    #[command(flatten)]
    pub relay: RelayArgs,

    #[command(flatten)]
    pub sweeper: SweeperArgs,

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
}

fn parse_bucket(name: &str) -> Result<String, String> {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let valid_ends = name
        .bytes()
        .next()
        .zip(name.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    if (3..=63).contains(&name.len()) && valid_chars && valid_ends {
        Ok(name.to_owned())
    } else {
        Err(
            "a bucket name has 3-63 characters: lowercase letters, digits, dots and hyphens, \
             starting and ending with a letter or digit"
                .to_owned(),
        )
    }
}

/// Parses the command line like `T::parse()`, but a missing or bad setting's error also names
/// the environment variable that sets it, since services are usually configured that way.
pub fn parse_cli<T: Parser>() -> T {
    match T::try_parse() {
        Ok(parsed) => parsed,
        Err(err) => {
            use clap::error::ErrorKind;
            let names_a_setting = matches!(
                err.kind(),
                ErrorKind::MissingRequiredArgument
                    | ErrorKind::InvalidValue
                    | ErrorKind::ValueValidation
            );
            if names_a_setting {
                let rendered = err.render().to_string();
                let hints = env_hints(&T::command(), &rendered);
                eprint!("{rendered}");
                for hint in hints {
                    eprintln!("  hint: {hint}");
                }
                std::process::exit(2);
            }
            err.exit()
        }
    }
}

/// For each `--flag` mentioned in a clap error, "set it with --flag or VARIABLE".
fn env_hints(command: &clap::Command, message: &str) -> Vec<String> {
    let mut hints = Vec::new();
    let mut stack = vec![command.clone()];
    while let Some(cmd) = stack.pop() {
        for arg in cmd.get_arguments() {
            if let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) {
                let flag = format!("--{long}");
                let mentioned = message.match_indices(&flag).any(|(i, _)| {
                    !message[i + flag.len()..]
                        .starts_with(|c: char| c == '-' || c.is_alphanumeric())
                });
                let hint = format!(
                    "{flag} is also set by the environment variable {}",
                    env.to_string_lossy()
                );
                if mentioned && !hints.contains(&hint) {
                    hints.push(hint);
                }
            }
        }
        stack.extend(cmd.get_subcommands().cloned());
    }
    hints
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_follow_s3_rules() {
        assert!(parse_bucket("vidq-media").is_ok());
        assert!(parse_bucket("ab").is_err());
        assert!(parse_bucket("Upper").is_err());
        assert!(parse_bucket("-dash").is_err());
        assert!(parse_bucket("under_score").is_err());
    }

    #[test]
    fn secrets_never_print() {
        let secret = Secret::new("postgres://u:pw@h/db");
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(secret.expose(), "postgres://u:pw@h/db");
    }
}
