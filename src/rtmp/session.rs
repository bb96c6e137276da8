//! One RTMP connection: the handshake, `connect` to the `live` application and `publish`
//! with a stream key, all within [`HANDSHAKE_LIMIT`]; the key is checked before any media
//! message is read. Then every audio and video message goes to the recording's FFmpeg child
//! ([`Encoder`]) until the encoder leaves, sends too little for too long, is replaced by a
//! new publish of the same key, or FFmpeg stops. The stream key is never written to a log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rml_rtmp::handshake::{Handshake, HandshakeProcessResult, PeerType};
use rml_rtmp::sessions::{
    ServerSession, ServerSessionConfig, ServerSessionEvent, ServerSessionResult, StreamMetadata,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::sync::CancellationToken;

use super::encoder::{Encoder, Start};
use super::flv::{self, Unsupported};
use super::{APP_NAME, Shared};
use crate::app::live::PublishRefusal;
use crate::db::recordings::RecordingRow;
use crate::domain::ids::RecordingId;
use crate::http::limits::MIN_PROGRESS_BYTES;
use crate::sync::ReadWriteLocked;

/// A connection that has not completed the handshake, `connect` and `publish` this long after
/// it opened is closed: idle or trickling clients cannot hold the listener's slots.
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum Ended {
    /// The encoder closed the connection, or sent `deleteStream`.
    #[error("the encoder left")]
    Left,
    /// No publish within [`HANDSHAKE_LIMIT`].
    #[error("no publish within {0:?} of connecting")]
    HandshakeTimeout(Duration),
    /// Fewer than [`MIN_PROGRESS_BYTES`] arrived within the idle limit.
    #[error("the encoder sent less than {MIN_PROGRESS_BYTES} bytes in {0:?}")]
    TooSlow(Duration),
    /// `connect` named another application than `live`.
    #[error("connect to an unknown application (the server URL must end in /{APP_NAME})")]
    UnknownApp,
    /// The publish was refused (the reason is logged where it is decided).
    #[error("publish refused")]
    Refused,
    /// A codec vidq does not take.
    #[error("{0}")]
    Codec(#[from] Unsupported),
    /// No video at all (audio only): the recording failed.
    #[error("no_video_stream: {0}")]
    NoVideo(String),
    /// A new publish of the same key took over.
    #[error("replaced by a new publish of the same stream key")]
    Replaced,
    /// The process is shutting down.
    #[error("shutting down")]
    Shutdown,
    /// FFmpeg would not start or stopped taking the stream.
    #[error("FFmpeg: {0}")]
    Encoder(String),
    /// The peer spoke something else than RTMP, or the socket failed.
    #[error("{0}")]
    Protocol(String),
    /// The database or the ingest could not answer.
    #[error("{0}")]
    App(String),
}

/// Serves one connection until it ends, and logs how it ended.
pub async fn serve(socket: tokio::net::TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    let mut conn = Conn {
        read,
        write,
        buf: vec![0u8; 64 * 1024],
    };
    let started = tokio::time::Instant::now();
    let negotiated = tokio::select! {
        negotiated = tokio::time::timeout(HANDSHAKE_LIMIT, negotiate(&mut conn, peer, &shared)) => {
            negotiated.unwrap_or(Err(Ended::HandshakeTimeout(HANDSHAKE_LIMIT)))
        }
        () = shared.shutdown.cancelled() => Err(Ended::Shutdown),
    };
    let ended = match negotiated {
        Ok(published) => {
            let id = published.recording.id;
            let ended = stream(&mut conn, published, &shared).await;
            let secs = started.elapsed().as_secs_f64();
            match &ended {
                Ended::Left => {
                    tracing::info!(recording_id = %id, %peer, secs, "RTMP stream ended: the encoder left; the recording ends if it does not come back within VIDQ_LIVE_IDLE_SECS")
                }
                Ended::Codec(_) | Ended::NoVideo(_) | Ended::Encoder(_) | Ended::App(_) => {
                    tracing::warn!(recording_id = %id, %peer, secs, reason = %ended, "RTMP stream closed")
                }
                _ => {
                    tracing::info!(recording_id = %id, %peer, secs, reason = %ended, "RTMP stream closed")
                }
            }
            return;
        }
        Err(ended) => ended,
    };
    match ended {
        Ended::Left | Ended::Refused => {}
        other => tracing::info!(%peer, reason = %other, "RTMP connection closed before publishing"),
    }
}

/// The connection's two halves and a read buffer.
struct Conn {
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
    buf: Vec<u8>,
}

impl Conn {
    /// The next bytes the peer sent; [`Ended::Left`] at its end.
    async fn receive(&mut self) -> Result<&[u8], Ended> {
        let n = self
            .read
            .read(&mut self.buf)
            .await
            .map_err(|e| Ended::Protocol(format!("reading: {e}")))?;
        if n == 0 {
            return Err(Ended::Left);
        }
        Ok(&self.buf[..n])
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), Ended> {
        self.write
            .write_all(bytes)
            .await
            .map_err(|e| Ended::Protocol(format!("writing: {e}")))
    }

    /// Sends the session's packets; returns its events.
    async fn settle(
        &mut self,
        results: Vec<ServerSessionResult>,
    ) -> Result<Vec<ServerSessionEvent>, Ended> {
        let mut events = Vec::new();
        for result in results {
            match result {
                ServerSessionResult::OutboundResponse(packet) => self.send(&packet.bytes).await?,
                ServerSessionResult::RaisedEvent(event) => events.push(event),
                ServerSessionResult::UnhandleableMessageReceived(_) => {}
            }
        }
        Ok(events)
    }
}

/// What a successful negotiation leaves: the session, its recording, its key (for the
/// FFmpeg child's writes only, through a stand-in), and the events that came in the same
/// reads as the publish.
struct Published {
    session: ServerSession,
    recording: RecordingRow,
    stream_key: String,
    pending: Vec<ServerSessionEvent>,
}

fn protocol(error: impl std::fmt::Debug) -> Ended {
    Ended::Protocol(format!("not RTMP: {error:?}"))
}

/// The handshake, `connect` and `publish`, with the key checked.
async fn negotiate(conn: &mut Conn, peer: SocketAddr, shared: &Shared) -> Result<Published, Ended> {
    let remaining = handshake(conn).await?;
    let (mut session, initial) =
        ServerSession::new(ServerSessionConfig::new()).map_err(protocol)?;
    conn.settle(initial).await?;
    let mut input = remaining;
    loop {
        let results = session.handle_input(&input).map_err(protocol)?;
        let mut events = conn.settle(results).await?.into_iter();
        while let Some(event) = events.next() {
            match event {
                ServerSessionEvent::ConnectionRequested {
                    request_id,
                    app_name,
                } => {
                    if app_name.trim_end_matches('/') != APP_NAME {
                        let refusal = session
                            .reject_request(
                                request_id,
                                "NetConnection.Connect.Rejected",
                                "unknown application",
                            )
                            .map_err(protocol)?;
                        conn.settle(refusal).await?;
                        return Err(Ended::UnknownApp);
                    }
                    let accepted = session.accept_request(request_id).map_err(protocol)?;
                    conn.settle(accepted).await?;
                }
                ServerSessionEvent::PublishStreamRequested {
                    request_id,
                    stream_key,
                    ..
                } => {
                    // OBS may append a query to the stream name; the key is what precedes it.
                    let key = stream_key.split('?').next().unwrap_or_default().to_owned();
                    let refusal = match crate::app::live::publishable(&shared.ctx, &key).await {
                        Ok(Ok(recording)) => {
                            let accepted = session.accept_request(request_id).map_err(protocol)?;
                            let mut pending = conn.settle(accepted).await?;
                            pending.extend(events);
                            return Ok(Published {
                                session,
                                recording,
                                stream_key: key,
                                pending,
                            });
                        }
                        Ok(Err(refusal)) => refusal,
                        Err(error) => {
                            tracing::warn!(%peer, error = %crate::telemetry::error_chain(&error), "RTMP publish not checked: the database did not answer");
                            let refusal = session
                                .reject_request(request_id, "NetStream.Publish.Failed", "try again")
                                .map_err(protocol)?;
                            conn.settle(refusal).await?;
                            return Err(Ended::App(error.to_string()));
                        }
                    };
                    log_refusal(peer, &refusal);
                    let refused = session
                        .reject_request(request_id, "NetStream.Publish.BadName", "refused")
                        .map_err(protocol)?;
                    conn.settle(refused).await?;
                    return Err(Ended::Refused);
                }
                // Nothing else is acted on before a publish (no media can come before one).
                _ => {}
            }
        }
        input = conn.receive().await?.to_vec();
    }
}

/// The RTMP handshake; returns the bytes that came after it.
async fn handshake(conn: &mut Conn) -> Result<Vec<u8>, Ended> {
    let mut handshake = Handshake::new(PeerType::Server);
    loop {
        let data = conn.receive().await?.to_vec();
        match handshake.process_bytes(&data).map_err(protocol)? {
            HandshakeProcessResult::InProgress { response_bytes } => {
                conn.send(&response_bytes).await?;
            }
            HandshakeProcessResult::Completed {
                response_bytes,
                remaining_bytes,
            } => {
                conn.send(&response_bytes).await?;
                return Ok(remaining_bytes);
            }
        }
    }
}

/// Why a publish was refused, for the operator (the encoder hears only "refused").
fn log_refusal(peer: SocketAddr, refusal: &PublishRefusal) {
    match refusal {
        PublishRefusal::UnknownKey => {
            tracing::info!(%peer, "RTMP publish refused: no recording has this stream key")
        }
        PublishRefusal::OtherNode(node) => {
            tracing::info!(%peer, %node, "RTMP publish refused: the recording is taken by another node; publish there")
        }
        PublishRefusal::Over(state) => {
            tracing::info!(%peer, state = state.as_str(), "RTMP publish refused: the recording has ended; create a new one")
        }
    }
}

/// The media phase: every message to the recording's FFmpeg child, until the stream ends.
async fn stream(conn: &mut Conn, published: Published, shared: &Arc<Shared>) -> Ended {
    let Published {
        mut session,
        recording,
        stream_key,
        pending,
    } = published;
    let stop = shared.shutdown.child_token();
    let turn = shared.streams.take(recording.id, stop.clone()).await;
    tracing::info!(recording_id = %recording.id, "RTMP stream publishing");
    // FFmpeg's URL names a stand-in for the key, valid while this stream runs.
    let alias = format!("rtmp-{:032x}", rand::random::<u128>());
    shared
        .aliases
        .write_locked()
        .insert(alias.clone(), stream_key);
    let mut media = Media {
        shared: shared.clone(),
        recording: recording.id,
        playlist_url: format!(
            "{}{}{alias}/index.m3u8",
            shared.internal_ingest,
            crate::http::ingest_server::PREFIX,
        ),
        metadata: None,
        encoder: None,
    };
    let ended = pump(
        conn,
        &mut session,
        &mut media,
        pending,
        &stop,
        shared.body_idle,
    )
    .await;
    let ended = match (ended, stop.is_cancelled(), shared.shutdown.is_cancelled()) {
        (_, _, true) => Ended::Shutdown,
        (Ended::Left, true, false) => Ended::Replaced,
        (ended, _, _) => ended,
    };
    if let Some(encoder) = media.encoder.take() {
        let (status, stderr) = encoder.finish().await;
        if !status.is_some_and(|s| s.success()) && !stderr.is_empty() {
            tracing::warn!(recording_id = %recording.id, ?status, stderr = %stderr, "the RTMP stream's FFmpeg ended badly");
        }
    }
    shared.aliases.write_locked().remove(&alias);
    drop(turn);
    ended
}

/// Reads and forwards until the stream ends; [`Ended::Left`] also when `stop` fires.
async fn pump(
    conn: &mut Conn,
    session: &mut ServerSession,
    media: &mut Media,
    pending: Vec<ServerSessionEvent>,
    stop: &CancellationToken,
    idle: Duration,
) -> Ended {
    for event in pending {
        if let Err(ended) = media.handle(event).await {
            return ended;
        }
    }
    let mut window_bytes = 0usize;
    let mut window_end = tokio::time::Instant::now() + idle;
    loop {
        let data = tokio::select! {
            () = stop.cancelled() => return Ended::Left,
            read = tokio::time::timeout_at(window_end, conn.receive()) => match read {
                Err(_) => return Ended::TooSlow(idle),
                Ok(Err(ended)) => return ended,
                Ok(Ok(data)) => data.to_vec(),
            },
        };
        window_bytes += data.len();
        if window_bytes >= MIN_PROGRESS_BYTES {
            window_bytes = 0;
            window_end = tokio::time::Instant::now() + idle;
        }
        let results = match session.handle_input(&data) {
            Ok(results) => results,
            Err(error) => return protocol(error),
        };
        let events = match conn.settle(results).await {
            Ok(events) => events,
            Err(ended) => return ended,
        };
        for event in events {
            if let Err(ended) = media.handle(event).await {
                return ended;
            }
        }
    }
}

/// A stream's media side: its metadata, and the FFmpeg child started at its first message.
struct Media {
    shared: Arc<Shared>,
    recording: RecordingId,
    playlist_url: String,
    metadata: Option<StreamMetadata>,
    encoder: Option<Encoder>,
}

impl Media {
    async fn handle(&mut self, event: ServerSessionEvent) -> Result<(), Ended> {
        match event {
            ServerSessionEvent::StreamMetadataChanged { metadata, .. } => {
                // A codec the listener does not take closes the connection and leaves the
                // recording as it was: the broadcaster fixes the encoder's setting and
                // publishes again with the same key. A broadcast with no video at all (its
                // metadata names audio only) fails its recording at once.
                match metadata.video_codec_id {
                    Some(id) => flv::video_id(id)?,
                    None if metadata.audio_codec_id.is_some() => {
                        let why =
                            "the broadcast has no video track (its metadata names audio only)";
                        return Err(self.without_video(why.to_owned()).await);
                    }
                    None => {}
                }
                if let Some(id) = metadata.audio_codec_id {
                    flv::audio_id(id)?;
                }
                self.metadata = Some(metadata);
                Ok(())
            }
            ServerSessionEvent::VideoDataReceived {
                data, timestamp, ..
            } => {
                flv::check_video(&data)?;
                self.forward(flv::TAG_VIDEO, timestamp.value, data).await
            }
            ServerSessionEvent::AudioDataReceived {
                data, timestamp, ..
            } => {
                flv::check_audio(&data)?;
                self.forward(flv::TAG_AUDIO, timestamp.value, data).await
            }
            ServerSessionEvent::PublishStreamFinished { .. } => Err(Ended::Left),
            _ => Ok(()),
        }
    }

    /// The broadcast has no video: its recording fails at once (`no_video_stream`) and the
    /// connection ends.
    async fn without_video(&self, why: String) -> Ended {
        if let Err(error) =
            crate::app::live::fail_without_video(&self.shared.ctx, self.recording, &why).await
        {
            tracing::warn!(recording_id = %self.recording, error = %crate::telemetry::error_chain(&error),
                "could not fail a recording without video");
        }
        Ended::NoVideo(why)
    }

    async fn forward(&mut self, kind: u8, timestamp: u32, data: Bytes) -> Result<(), Ended> {
        if self.encoder.is_none() {
            self.encoder = Some(self.start(kind).await?);
        }
        let encoder = self.encoder.as_mut().expect("started above");
        if let Err(error) = encoder.send(kind, timestamp, &data).await {
            let (status, stderr) = self.encoder.take().expect("running").finish().await;
            return Err(Ended::Encoder(format!(
                "it stopped taking the stream ({error}; exit {status:?}): {stderr}"
            )));
        }
        Ok(())
    }

    /// Starts FFmpeg where the recording stands (its next segment number, the media time
    /// its playlists listed).
    async fn start(&self, first_kind: u8) -> Result<Encoder, Ended> {
        let (first_segment, resume_ms) =
            crate::app::live::resume_point(&self.shared.ctx, self.recording)
                .await
                .map_err(|e| Ended::App(e.to_string()))?;
        // Without metadata, expect both kinds (FFmpeg waits a moment for the missing one).
        let (audio, video) = match &self.metadata {
            Some(m) if m.audio_codec_id.is_some() || m.video_codec_id.is_some() => (
                m.audio_codec_id.is_some() || first_kind == flv::TAG_AUDIO,
                m.video_codec_id.is_some() || first_kind == flv::TAG_VIDEO,
            ),
            _ => (true, true),
        };
        tracing::debug!(recording_id = %self.recording, first_segment, resume_ms, "starting the RTMP stream's FFmpeg");
        Encoder::start(Start {
            ffmpeg: &self.shared.ffmpeg,
            playlist_url: &self.playlist_url,
            first_segment,
            resume_ms,
            audio,
            video,
        })
        .await
        .map_err(|e| Ended::Encoder(e.to_string()))
    }
}
