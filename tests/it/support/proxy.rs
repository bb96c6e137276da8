//! A TCP proxy in front of PostgreSQL whose connections a test can cut, to take a worker's
//! database away the way a network partition would.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    generation: Arc<std::sync::Mutex<CancellationToken>>,
}

impl Proxy {
    /// A proxy to the server `database_url` points at.
    pub async fn in_front_of(database_url: &str) -> Self {
        Self::start(upstream_of(database_url)).await
    }

    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(std::sync::Mutex::new(CancellationToken::new()));
        let (cut2, generation2) = (cut.clone(), generation.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if cut2.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused as soon as it opens
                }
                let token = generation2.lock().unwrap().clone();
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        () = token.cancelled() => {}
                    }
                });
            }
        });
        Self {
            port,
            cut,
            generation,
        }
    }

    /// Drops every open connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.blip();
    }

    /// Drops every open connection but lets new ones through: a blip that leaves each
    /// pooled connection broken.
    pub fn blip(&self) {
        let mut generation = self.generation.lock().unwrap();
        generation.cancel();
        *generation = CancellationToken::new();
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url_for(&self, url: &str) -> String {
        through(self.port, url)
    }
}

/// A TCP proxy that drops the connection carrying the `after`-th byte a client sends, once
/// (the bytes before it get through, the rest of that connection's do not), then passes
/// everything: a mobile link that dies mid-upload and comes back.
pub struct CutOnce {
    pub port: u16,
    pub cut: Arc<AtomicBool>,
}

impl CutOnce {
    pub async fn start(upstream: String, after: u64) -> Self {
        use std::sync::atomic::AtomicU64;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let cut = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let cut2 = cut.clone();
        let port = relay_each(upstream, move |client, server| {
            let (cut, sent) = (cut2.clone(), sent.clone());
            async move {
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let upward = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match client_rx.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let before = sent.fetch_add(n as u64, Ordering::SeqCst);
                        if !cut.load(Ordering::SeqCst) && before + n as u64 >= after {
                            cut.store(true, Ordering::SeqCst);
                            let keep = (after - before.min(after)) as usize;
                            let _ = server_tx.write_all(&buf[..keep]).await;
                            return; // both halves dropped: the connection dies
                        }
                        if server_tx.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                let downward = tokio::io::copy(&mut server_rx, &mut client_tx);
                tokio::select! {
                    () = upward => {}
                    _ = downward => {}
                }
            }
        })
        .await;
        Self { port, cut }
    }
}

/// A TCP proxy that holds everything the server sends for `delay` before passing it on (in
/// order), and passes what the client sends at once: a link whose every round trip costs at
/// least `delay`, so that a test can tell how many round trips a piece of work waited for.
pub struct Delayed {
    pub port: u16,
}

impl Delayed {
    pub async fn in_front_of(database_url: &str, delay: std::time::Duration) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let port = relay_each(
            upstream_of(database_url),
            move |client, server| async move {
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let (held_tx, mut held_rx) =
                    tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
                let hold = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n @ 1..) = server_rx.read(&mut buf).await {
                        let due = tokio::time::Instant::now() + delay;
                        if held_tx.send((due, buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                };
                let release = async {
                    while let Some((due, bytes)) = held_rx.recv().await {
                        // The delay this proxy exists to add.
                        tokio::time::sleep_until(due).await;
                        if client_tx.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                };
                let upward = tokio::io::copy(&mut client_rx, &mut server_tx);
                tokio::select! {
                    _ = upward => {}
                    () = async { tokio::join!(hold, release); } => {}
                }
            },
        )
        .await;
        Self { port }
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url_for(&self, url: &str) -> String {
        through(self.port, url)
    }
}

/// What [`FailOnce`] does to the connection whose client first sends its pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Failure {
    /// What the client sends from the read that completes the pattern on never reaches the
    /// server: the connection dies with its request half sent, as a link that drops
    /// mid-write.
    RequestCut,
    /// The read that completes the pattern and everything the client sends for `LOSE_WINDOW`
    /// after it reach the server, but nothing the server answers from then on reaches the
    /// client, and then the connection dies: the server did the work, the client never
    /// hears.
    AnswerLost,
}

/// How long a [`Failure::AnswerLost`] connection keeps passing the client's bytes upward
/// before it dies: long enough for a pipelined transaction, its `COMMIT` included, to reach
/// the server and commit.
const LOSE_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);

/// A TCP proxy in front of PostgreSQL that fails, once, the connection whose client sends
/// `pattern` (say, a value bound to a statement), and passes everything else through.
pub struct FailOnce {
    pub port: u16,
    /// Set when the failure has happened.
    pub fired: Arc<AtomicBool>,
}

impl FailOnce {
    pub async fn in_front_of(database_url: &str, pattern: Vec<u8>, failure: Failure) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let fired = Arc::new(AtomicBool::new(false));
        let (fired2, pattern) = (fired.clone(), Arc::new(pattern));
        let port = relay_each(upstream_of(database_url), move |client, server| {
            let (fired, pattern) = (fired2.clone(), pattern.clone());
            async move {
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                // Set on this connection once it is the one that fails.
                let muted = AtomicBool::new(false);
                let upward = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut dying_at = None;
                    // The end of what came before, for a pattern split between reads.
                    let mut seen: Vec<u8> = Vec::new();
                    loop {
                        let read = client_rx.read(&mut buf);
                        let n = match dying_at {
                            Some(deadline) => match tokio::time::timeout_at(deadline, read).await {
                                Ok(Ok(n @ 1..)) => n,
                                _ => return,
                            },
                            None => match read.await {
                                Ok(n @ 1..) => n,
                                _ => return,
                            },
                        };
                        seen.extend_from_slice(&buf[..n]);
                        if dying_at.is_none()
                            && contains(&seen, &pattern)
                            && !fired.swap(true, Ordering::SeqCst)
                        {
                            if failure == Failure::RequestCut {
                                return; // both halves dropped with the request half sent
                            }
                            muted.store(true, Ordering::SeqCst);
                            dying_at = Some(tokio::time::Instant::now() + LOSE_WINDOW);
                        }
                        if server_tx.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        let keep = seen.len().min(pattern.len().saturating_sub(1));
                        seen.drain(..seen.len() - keep);
                    }
                };
                let downward = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = server_rx.read(&mut buf).await {
                        if muted.load(Ordering::SeqCst) {
                            continue; // the answer is lost on the way
                        }
                        if client_tx.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = upward => {}
                    () = downward => {}
                }
            }
        })
        .await;
        Self { port, fired }
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url_for(&self, url: &str) -> String {
        through(self.port, url)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Listens on a loopback port and, for each connection a client opens there, opens one to
/// `upstream` and hands both to `relay`, which passes bytes between them as its proxy
/// does. Returns the port.
async fn relay_each<F, Fut>(upstream: String, relay: F) -> u16
where
    F: Fn(TcpStream, TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (upstream, relay) = (Arc::new(upstream), Arc::new(relay));
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (upstream, relay) = (upstream.clone(), relay.clone());
            tokio::spawn(async move {
                if let Ok(server) = TcpStream::connect(upstream.as_str()).await {
                    relay(client, server).await;
                }
            });
        }
    });
    port
}

/// The `host:port` of the server `database_url` points at.
fn upstream_of(database_url: &str) -> String {
    let url = url::Url::parse(database_url).unwrap();
    format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432))
}

/// `url` with its host and port replaced by those of a proxy listening on `port`.
fn through(port: u16, url: &str) -> String {
    let mut parsed = url::Url::parse(url).unwrap();
    parsed.set_host(Some("127.0.0.1")).unwrap();
    parsed.set_port(Some(port)).unwrap();
    parsed.into()
}
