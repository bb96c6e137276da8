//! This node's ingest settings ([`Ingest`], built by the API role from its configuration) and
//! how the URLs encoders publish to are made from them.

use std::time::Duration;

use crate::adapters::spool::SpoolRoot;
use crate::app::upload_locks::UploadLocks;
use crate::domain::upload::UploadStore;

/// Where this node keeps uploads through vidq.
#[derive(Clone, Debug)]
pub struct Ingest {
    /// The allowed root.
    pub spool: SpoolRoot,
    /// This process's directory for live files still arriving.
    pub incoming: std::sync::Arc<crate::adapters::incoming::IncomingDir>,
    /// The node the rows are written under (the sweeper of the same name lands them).
    pub node_id: String,
    /// Where new uploads keep their bytes while they arrive (`VIDQ_TUS_STORE`).
    pub store: UploadStore,
    /// With the `s3` store: the size of a part.
    pub part_bytes: u64,
    /// How long an upload may take to arrive.
    pub ttl: Duration,
    /// Files of a recording still count this long after its end.
    pub live_grace: Duration,
    /// `VIDQ_LIVE_DB_PATIENCE_SECS`: how long a live file that arrived waits for the database.
    pub db_patience: Duration,
    /// The recordings of stream keys looked up lately (for files arriving while the database
    /// is away).
    pub live_keys: crate::app::live_files::KnownKeys,
    /// One request at a time per upload.
    pub locks: UploadLocks,
    /// Where encoders reach the live ingest listener: a fixed public URL, or the port it
    /// listens on at the host the client reached the API at.
    pub live_ingest: LiveIngestAt,
    /// Where encoders reach the RTMP listener, when one runs (`VIDQ_RTMP_ADDR`); its URL
    /// is made as the live ingest listener's is.
    pub rtmp: Option<LiveIngestAt>,
}

/// How a recording's `ingest_url` is made.
#[derive(Clone, Debug)]
pub enum LiveIngestAt {
    /// `VIDQ_INGEST_PUBLIC_URL`.
    Public(String),
    /// The ingest listener's port, at the API's host.
    Port(u16),
}

impl Ingest {
    /// `rtmp://host:port/live`, the server URL an encoder publishes to (the stream key is the
    /// stream name), given the API's base; `None` without an RTMP listener.
    pub fn rtmp_url(&self, api_base: &str) -> Option<String> {
        let base = match self.rtmp.as_ref()? {
            LiveIngestAt::Public(url) => url.trim_end_matches('/').to_owned(),
            LiveIngestAt::Port(port) => {
                let host = url::Url::parse(api_base)
                    .ok()
                    .and_then(|url| url.host().map(|h| h.to_string()))
                    .unwrap_or_else(|| "127.0.0.1".to_owned());
                format!("rtmp://{host}:{port}")
            }
        };
        Some(format!(
            "{base}/{}",
            crate::domain::recording::RTMP_APP_NAME
        ))
    }

    /// `scheme://host[:port]` of the ingest listener, given the API's base.
    pub fn ingest_base(&self, api_base: &str) -> String {
        match &self.live_ingest {
            LiveIngestAt::Public(url) => url.trim_end_matches('/').to_owned(),
            LiveIngestAt::Port(port) => {
                let mut url = match url::Url::parse(api_base) {
                    Ok(url) => url,
                    Err(_) => return api_base.to_owned(),
                };
                match url.set_port(Some(*port)) {
                    Ok(()) => url.as_str().trim_end_matches('/').to_owned(),
                    Err(()) => api_base.to_owned(),
                }
            }
        }
    }
}
