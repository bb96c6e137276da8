//! An S3-compatible server inside the process (s3s over a local directory), for `vidq dev`
//! on a laptop and for the tests. It speaks the real protocol, SigV4 and presigned URLs
//! included, so the same aws-sdk-s3 code paths run against it as against AWS.

use std::net::SocketAddr;
use std::path::Path;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running embedded S3 server; stops when dropped or when [`EmbeddedS3::stop`] is called.
pub struct EmbeddedS3 {
    addr: SocketAddr,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// Why the embedded server could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the embedded S3 server on {root}")]
pub struct EmbeddedS3Error {
    root: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl EmbeddedS3 {
    /// Serves the objects under `root` (one directory per bucket) on `listener`, accepting
    /// requests signed with this key pair only.
    pub fn start(
        root: &Path,
        listener: TcpListener,
        access_key: &str,
        secret_key: &str,
    ) -> Result<Self, EmbeddedS3Error> {
        let err = |source: Box<dyn std::error::Error + Send + Sync>| EmbeddedS3Error {
            root: root.display().to_string(),
            source,
        };
        std::fs::create_dir_all(root).map_err(|e| err(Box::new(e)))?;
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| err(format!("{e:?}").into()))?;
        let mut builder = S3ServiceBuilder::new(fs);
        builder.set_auth(SimpleAuth::from_single(access_key, secret_key));
        let service = builder.build();
        let addr = listener.local_addr().map_err(|e| err(Box::new(e)))?;
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let http = ConnBuilder::new(TokioExecutor::new());
            loop {
                let socket = tokio::select! {
                    () = stopped.cancelled() => break,
                    accepted = listener.accept() => match accepted {
                        Ok((socket, _)) => socket,
                        Err(error) => {
                            tracing::warn!(%error, "embedded S3 could not accept a connection");
                            continue;
                        }
                    },
                };
                let conn = http
                    .serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned();
                let stopped = stopped.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = conn => {}
                        () = stopped.cancelled() => {}
                    }
                });
            }
        });
        Ok(Self {
            addr,
            stop,
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ip:port`, for `VIDQ_S3_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting and closes open connections.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for EmbeddedS3 {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
