//! Settings of uploads and live streams that come through vidq itself: the spool, the
//! ingest listener, RTMP and live recordings (the `api`, `sweeper` and `dev` roles).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use clap::Args;
use url::Url;

use crate::domain::upload::UploadStore;

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
    /// How long the ingest listener waits for the database with a live file that has
    /// arrived whole, in seconds. Encoders (and the RTMP listener's own FFmpeg) never send a
    /// refused file again, so through a database restart the file waits in the spool and
    /// its encoder waits for the answer; only past this is it answered 503 and counted lost
    /// (`vidq_live_files_lost_total`, the recording's `segments.lost`, an ERROR line).
    #[arg(long = "live-db-patience-secs", env = "VIDQ_LIVE_DB_PATIENCE_SECS", value_name = "SECS",
          default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub db_patience_secs: u64,
}

impl Default for LiveArgs {
    fn default() -> Self {
        Self {
            idle_secs: 30,
            grace_secs: 10,
            waiting_ttl_secs: 86_400,
            db_patience_secs: 30,
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
    #[arg(
        long = "tus-store",
        env = "VIDQ_TUS_STORE",
        value_name = "STORE",
        default_value = "spool"
    )]
    pub tus_store: UploadStore,
    /// With the `s3` store: the size of each S3 part (all but a file's last), in bytes; at
    /// least S3's minimum of 5 MiB. A request with a length holds a few chunks of memory; one
    /// without (chunked transfer) reads up to one part ahead.
    #[arg(long = "tus-part-bytes", env = "VIDQ_TUS_PART_BYTES", value_name = "BYTES",
          default_value_t = 8 * 1024 * 1024,
          value_parser = clap::value_parser!(u64).range(5 * 1024 * 1024..=5 * 1024 * 1024 * 1024))]
    pub tus_part_bytes: u64,
}

impl IngestArgs {
    /// The chosen store.
    pub fn store(&self) -> UploadStore {
        self.tus_store
    }
}

/// The stores as clap offers them: their names as the domain spells them.
impl clap::ValueEnum for UploadStore {
    fn value_variants<'a>() -> &'a [Self] {
        Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.as_str()))
    }
}

impl Default for IngestArgs {
    fn default() -> Self {
        Self {
            resumable_ttl_secs: 86_400,
            ingest_addr: "127.0.0.1:8081".parse().expect("a valid address"),
            ingest_public_url: None,
            tus_store: UploadStore::Spool,
            tus_part_bytes: 8 * 1024 * 1024,
        }
    }
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
