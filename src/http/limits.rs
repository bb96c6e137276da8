//! What one client may hold: open connections per address, and how long a request body may
//! make no progress.
//!
//! actix bounds the request head (`client_request_timeout`) and counts connections per
//! worker for everyone together, but nothing bounded a body sent a byte a second, nor one
//! address opening thousands of such connections. The connection count is kept from
//! `on_connect` (a slot in the connection's data, released when the connection drops); the
//! body bound wraps every request's payload stream.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{Extensions, Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::middleware::Next;
use actix_web::web::Bytes;
use futures_util::Stream;
use tokio::time::{Instant, Sleep};

use super::error::ApiError;
use crate::sync::Locked;

/// A body counts as progressing when this many bytes (or its end) arrive within the idle
/// limit. One byte is not progress: a client dribbling a byte a second would hold its
/// connection for as long as it likes.
pub const MIN_PROGRESS_BYTES: usize = 1024;

/// Open connections per client address, shared by every worker thread of one server.
#[derive(Clone, Debug, Default)]
pub struct ConnectionCounter {
    open: Arc<Mutex<HashMap<IpAddr, u32>>>,
}

impl ConnectionCounter {
    /// Counts a new connection from `ip`; the slot says whether it is over `max`.
    pub fn open(&self, ip: IpAddr, max: u32) -> ConnectionSlot {
        let mut open = self.open.locked();
        let count = open.entry(ip).or_insert(0);
        *count += 1;
        ConnectionSlot {
            counter: self.clone(),
            ip,
            over_limit: *count > max,
        }
    }

    /// Connections open from `ip` now.
    pub fn count(&self, ip: IpAddr) -> u32 {
        let open = self.open.locked();
        open.get(&ip).copied().unwrap_or(0)
    }
}

/// One counted connection; dropping it (the connection closed) releases the count.
#[derive(Debug)]
pub struct ConnectionSlot {
    counter: ConnectionCounter,
    ip: IpAddr,
    /// The address already held the maximum when this connection opened.
    pub over_limit: bool,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.counter.open.locked();
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// The caps of a listener vidq accepts on itself (the live ingest listener, RTMP): at most
/// `max_per_ip` connections from one address and `max_total` in all; a connection past either
/// is closed as soon as it is accepted.
pub struct AcceptGate {
    /// What the log lines call the listener.
    name: &'static str,
    slots: Arc<tokio::sync::Semaphore>,
    max_total: usize,
    per_ip: ConnectionCounter,
    max_per_ip: u32,
}

/// A connection within the caps; dropping it (the connection ended) frees its places.
pub struct Admitted {
    _slot: tokio::sync::OwnedSemaphorePermit,
    _from_peer: ConnectionSlot,
}

impl AcceptGate {
    /// A gate for the listener `name`.
    pub fn new(name: &'static str, max_total: usize, max_per_ip: u32) -> Self {
        Self {
            name,
            slots: Arc::new(tokio::sync::Semaphore::new(max_total)),
            max_total,
            per_ip: ConnectionCounter::default(),
            max_per_ip,
        }
    }

    /// The next connection within the caps; `None` once `shutdown` fires.
    pub async fn accept(
        &self,
        listener: &tokio::net::TcpListener,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> Option<(tokio::net::TcpStream, std::net::SocketAddr, Admitted)> {
        loop {
            let (socket, peer) = tokio::select! {
                () = shutdown.cancelled() => return None,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, listener = self.name, "could not accept a connection");
                        continue;
                    }
                },
            };
            let from_peer = self.per_ip.open(peer.ip(), self.max_per_ip);
            if from_peer.over_limit {
                tracing::debug!(
                    listener = self.name,
                    max = self.max_per_ip,
                    "an address is at its connection limit; closing its new connection"
                );
                continue;
            }
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                tracing::warn!(
                    listener = self.name,
                    max = self.max_total,
                    "listener at its connection limit; closing a new connection"
                );
                continue;
            };
            let admitted = Admitted {
                _slot: slot,
                _from_peer: from_peer,
            };
            return Some((socket, peer, admitted));
        }
    }
}

/// The `on_connect` hook: stores a [`ConnectionSlot`] in the connection's data.
pub fn on_connect(
    counter: ConnectionCounter,
    max: u32,
) -> impl Fn(&dyn std::any::Any, &mut Extensions) + Send + Sync + 'static {
    move |io, data| {
        let peer = io
            .downcast_ref::<actix_web::rt::net::TcpStream>()
            .and_then(|tcp| tcp.peer_addr().ok());
        if let Some(peer) = peer {
            data.insert(counter.open(peer.ip(), max));
        }
    }
}

/// Middleware: refuses requests on a connection over its address's limit (429, and the
/// connection is closed), and bounds the idle time of every request body.
pub async fn enforce(
    body_idle: Duration,
    max_connections_per_ip: u32,
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody + 'static>, actix_web::Error> {
    if req
        .conn_data::<ConnectionSlot>()
        .is_some_and(|slot| slot.over_limit)
    {
        return Err(ApiError::too_many_connections(max_connections_per_ip).into());
    }
    let (_, payload) = req.parts_mut();
    let inner = std::mem::replace(payload, Payload::None);
    if !matches!(inner, Payload::None) {
        let bounded: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>> =
            Box::pin(IdleBody::new(inner, body_idle));
        *payload = Payload::from(bounded);
    }
    next.call(req).await
}

/// The error a body that stopped making progress ends with.
#[derive(Debug, thiserror::Error)]
#[error("the request body made no progress for {0:?}")]
pub struct BodyIdle(pub Duration);

impl BodyIdle {
    /// Whether a payload error is this one.
    pub fn is(err: &PayloadError) -> bool {
        matches!(err, PayloadError::Io(io) if io.get_ref().is_some_and(|e| e.is::<BodyIdle>()))
    }
}

/// A payload stream that fails with [`BodyIdle`] when fewer than [`MIN_PROGRESS_BYTES`]
/// arrive within `idle`.
struct IdleBody {
    inner: Payload,
    idle: Duration,
    timer: Pin<Box<Sleep>>,
    since_progress: usize,
    done: bool,
}

impl IdleBody {
    fn new(inner: Payload, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
            since_progress: 0,
            done: false,
        }
    }
}

impl Stream for IdleBody {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                this.since_progress += chunk.len();
                if this.since_progress >= MIN_PROGRESS_BYTES {
                    this.since_progress = 0;
                    let deadline = Instant::now() + this.idle;
                    this.timer.as_mut().reset(deadline);
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(other) => {
                this.done = other.is_none();
                Poll::Ready(other)
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.done = true;
                    let err =
                        std::io::Error::new(std::io::ErrorKind::TimedOut, BodyIdle(this.idle));
                    Poll::Ready(Some(Err(PayloadError::Io(err))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_per_address_and_release_on_drop() {
        let counter = ConnectionCounter::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = counter.open(a, 2);
        let second = counter.open(a, 2);
        let third = counter.open(a, 2);
        let other = counter.open(b, 2);
        assert!(!first.over_limit && !second.over_limit && !other.over_limit);
        assert!(third.over_limit);
        drop(third);
        drop(first);
        assert_eq!(counter.count(a), 1);
        assert!(!counter.open(a, 2).over_limit);
        drop((second, other));
        assert_eq!(counter.count(a), 0);
        assert_eq!(counter.count(b), 0);
    }
}
