//! HAProxy (Debian's package) in front of API processes, as a production load balancer
//! would be: round robin per request, no affinity, a health check that takes a dead node out
//! within a second and puts it back once it answers, and each request's client address in
//! `X-Forwarded-For`. Each request gets a server connection of its own (`http-server-close`),
//! so none is sent on an idle one the API is closing at that moment.

use std::time::{Duration, Instant};

use tokio::process::Child;

use crate::support::process::free_port;

/// A running HAProxy.
pub struct Haproxy {
    /// Where clients reach it.
    pub port: u16,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    /// Round robin over `backends` (ports on 127.0.0.1); returns once it listens.
    pub async fn start(backends: &[u16]) -> Self {
        let port = free_port();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, backend)| {
                format!("    server api{i} 127.0.0.1:{backend} check inter 300 fall 1 rise 1\n")
            })
            .collect();
        let config = format!(
            "global\n    maxconn 2048\n\
             defaults\n    mode http\n    timeout connect 2s\n    timeout client 60s\n    \
             timeout server 60s\n    timeout http-keep-alive 60s\n    retries 0\n    \
             option http-server-close\n    option forwardfor\n\
             frontend clients\n    bind 127.0.0.1:{port}\n    default_backend apis\n\
             backend apis\n    balance roundrobin\n    option httpchk GET /healthz\n{servers}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = tokio::process::Command::new("haproxy")
            .arg("-db") // in the foreground, logging to stderr
            .arg("-f")
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("haproxy (Debian package `haproxy`; .ci/run installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "haproxy did not listen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            port,
            _child: child,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}
