//! The bench's tus client: one upload created with a POST and sent in PATCHes of one chunk
//! each, awaited one after the other, as a resumable client sends it. The same client
//! drives vidq and the peer server.

use std::time::Duration;

use anyhow::ensure;
use bytes::Bytes;

/// A tus server's creation URL, and the key its requests carry (vidq's; the peer takes none).
pub(super) struct TusClient {
    http: reqwest::Client,
    creation_url: String,
    key: Option<String>,
}

impl TusClient {
    pub(super) fn new(creation_url: String, key: Option<String>) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(600))
                .build()?,
            creation_url,
            key,
        })
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let request = self
            .http
            .request(method, url)
            .header("Tus-Resumable", "1.0.0");
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    async fn create(&self, length: u64) -> anyhow::Result<String> {
        let meta = "filename YmVuY2gubXA0,filetype dmlkZW8vbXA0"; // bench.mp4, video/mp4
        let answer = self
            .request(reqwest::Method::POST, &self.creation_url)
            .header("Upload-Length", length.to_string())
            .header("Upload-Metadata", meta)
            .send()
            .await?;
        ensure!(answer.status() == 201, "tus POST: {}", answer.status());
        // Both servers answer with an absolute URL (@tus/server unless `relativeLocation`).
        Ok(answer.headers()["location"].to_str()?.to_owned())
    }

    /// Creates an upload of `length` and PATCHes `chunk` until it is whole.
    pub(super) async fn upload(&self, length: u64, chunk: &Bytes) -> anyhow::Result<()> {
        let url = self.create(length).await?;
        let mut offset = 0u64;
        while offset < length {
            let n = (length - offset).min(chunk.len() as u64);
            let answer = self
                .request(reqwest::Method::PATCH, &url)
                .header("Upload-Offset", offset.to_string())
                .header("Content-Type", "application/offset+octet-stream")
                .body(chunk.slice(..n as usize))
                .send()
                .await?;
            ensure!(answer.status() == 204, "tus PATCH: {}", answer.status());
            offset += n;
        }
        Ok(())
    }

    /// `clients` uploads of `each` bytes at once.
    pub(super) async fn uploads(
        &self,
        clients: u64,
        each: u64,
        chunk: &Bytes,
    ) -> anyhow::Result<()> {
        let uploads = (0..clients).map(|_| self.upload(each, chunk));
        for done in futures_util::future::join_all(uploads).await {
            done?;
        }
        Ok(())
    }
}
