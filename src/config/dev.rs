//! Settings of `vidq dev`: every role in one process, with its own S3 and, if need be, its
//! own PostgreSQL.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use super::api::{AdminArgs, HttpConfig, PlaybackArgs, UploadConfig};
use super::ingest::{IngestArgs, LiveArgs, RtmpArgs, SpoolArgs};
use super::relay::RelayArgs;
use super::sweeper::SweeperArgs;
use super::worker::{MediaArgs, QueueArgs};

/// Where `vidq dev` gets its PostgreSQL when no DATABASE_URL is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DevPostgres {
    /// The server on localhost:5432 if one answers, else a private one.
    Auto,
    /// Always a private server under the data directory.
    Private,
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
