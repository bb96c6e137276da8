//! RTMP ingest (`VIDQ_RTMP_ADDR`): OBS, Larix, Streamlabs, hardware encoders and
//! `ffmpeg -f flv` publish to `rtmp://{host}/live` with a recording's stream key as the
//! stream name. Each publish runs one FFmpeg child that repackages the stream into the
//! recording's HLS files and PUTs them to this process's own ingest listener (on a loopback
//! port of its own), so everything downstream is the HTTP ingest's path, unchanged.
//!
//! The listener keeps the other listeners' limits: at most `max_connections_per_ip`
//! connections from one address (one more is closed as soon as it is accepted) and
//! [`MAX_CONNECTIONS`] in all; the handshake, `connect` and `publish` within
//! [`session::HANDSHAKE_LIMIT`], the key checked before any media is read; then at least
//! `MIN_PROGRESS_BYTES` every `body_idle`. Files are spooled under the broadcaster's fair
//! share of the spool, as every ingested file is.

pub mod encoder;
pub mod flv;
pub mod session;
pub mod streams;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::app::AppContext;
use crate::http::ingest_server::{self, IngestLimits};
use crate::http::limits::AcceptGate;

/// The RTMP application encoders connect to (declared with the recordings it feeds).
pub use crate::domain::recording::RTMP_APP_NAME as APP_NAME;

/// Connections the listener serves at once, above any one address's cap, so that one
/// address at its cap leaves room for everyone else. A connection costs a socket until it
/// publishes; each publishing one runs an FFmpeg child.
pub const MAX_CONNECTIONS: usize = 1024;

/// How the listener runs.
#[derive(Debug, Clone)]
pub struct RtmpSettings {
    /// The ffmpeg binary each stream's child runs.
    pub ffmpeg: PathBuf,
    /// Open connections per client address.
    pub max_connections_per_ip: u32,
    /// A stream that sends fewer than `MIN_PROGRESS_BYTES` in this long is closed.
    pub body_idle: Duration,
}

/// What every connection of one listener shares.
pub struct Shared {
    ctx: AppContext,
    ffmpeg: PathBuf,
    body_idle: Duration,
    /// `http://127.0.0.1:{port}`: the ingest listener the FFmpeg children PUT to.
    internal_ingest: String,
    /// Its stand-ins for the stream keys, one per running stream.
    aliases: ingest_server::KeyAliases,
    streams: Arc<streams::Streams>,
    shutdown: CancellationToken,
}

/// Serves RTMP on `listener` until `shutdown`; the task ends once every stream has ended
/// and its FFmpeg has written its last files. The FFmpeg children's files go to an ingest
/// listener of their own on a loopback port (they all come from one address, which the
/// public listener's per-address cap would refuse).
pub async fn serve(
    listener: tokio::net::TcpListener,
    ctx: AppContext,
    settings: RtmpSettings,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let internal = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot open a loopback port for the RTMP streams' FFmpeg children")?;
    let internal_ingest = format!("http://{}", internal.local_addr()?);
    // The children's listener outlives the streams: at shutdown each stream's FFmpeg still
    // writes its last segment and playlist through it.
    let streams_done = CancellationToken::new();
    let aliases = ingest_server::KeyAliases::default();
    ingest_server::serve_aliased(
        internal,
        ctx.clone(),
        IngestLimits {
            body_idle: settings.body_idle,
            max_connections_per_ip: u32::MAX,
        },
        Some(aliases.clone()),
        streams_done.clone(),
    );
    let shared = Arc::new(Shared {
        ctx,
        ffmpeg: settings.ffmpeg.clone(),
        body_idle: settings.body_idle,
        internal_ingest,
        aliases,
        streams: Arc::default(),
        shutdown: shutdown.clone(),
    });
    Ok(tokio::spawn(async move {
        let gate = AcceptGate::new("rtmp", MAX_CONNECTIONS, settings.max_connections_per_ip);
        let sessions = tokio_util::task::TaskTracker::new();
        while let Some((socket, peer, admitted)) = gate.accept(&listener, &shutdown).await {
            let shared = shared.clone();
            sessions.spawn(async move {
                let _admitted = admitted;
                session::serve(socket, peer, shared).await;
            });
        }
        sessions.close();
        sessions.wait().await;
        streams_done.cancel();
    }))
}
