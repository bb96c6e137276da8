//! A TCP switch in front of S3 on a fixed loopback port: S3 up, silent (connections accepted
//! and never answered) or refused (nothing listens), changed while the processes run.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::support::process::free_port;

/// How the S3 behind a [`Switch`] behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Connections reach S3.
    Up,
    /// Connections are accepted and never answered.
    Silent,
    /// Nothing listens: connections are refused.
    Refused,
}

/// A TCP switch in front of S3 on a fixed loopback port.
pub struct Switch {
    port: u16,
    upstream: String,
    mode: Arc<Mutex<Mode>>,
    /// Cancelled to close the listener and every connection of the current mode.
    generation: Mutex<CancellationToken>,
}

impl Switch {
    pub async fn start(upstream: std::net::SocketAddr, mode: Mode) -> Self {
        let switch = Self {
            port: free_port(),
            upstream: upstream.to_string(),
            mode: Arc::new(Mutex::new(mode)),
            generation: Mutex::new(CancellationToken::new()),
        };
        switch.set(mode).await;
        switch
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Closes what the previous mode had open and behaves as `mode` from now on.
    pub async fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
        let token = {
            let mut generation = self.generation.lock().unwrap();
            generation.cancel();
            *generation = CancellationToken::new();
            generation.clone()
        };
        if mode == Mode::Refused {
            return;
        }
        // The previous mode's listener closes once its task sees the cancellation.
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            let socket = TcpSocket::new_v4().unwrap();
            socket.set_reuseaddr(true).unwrap();
            let bound = socket
                .bind(format!("127.0.0.1:{}", self.port).parse().unwrap())
                .and_then(|()| socket.listen(1024));
            match bound {
                Ok(listener) => break listener,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("cannot listen on {} again: {e}", self.port),
            }
        };
        let upstream = self.upstream.clone();
        tokio::spawn(async move {
            loop {
                let (mut client, _) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(_) => return,
                    },
                    () = token.cancelled() => return,
                };
                let (token, upstream) = (token.clone(), upstream.clone());
                tokio::spawn(async move {
                    if mode == Mode::Silent {
                        token.cancelled().await;
                        return;
                    }
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
    }
}
