//! The load: bare keep-alive HTTP/1.1 connections, and what the clients do over them (create
//! and PUT uploads beforehand, confirm them as fast as answered or at a paced rate, read a
//! READY video's status for a fixed time).

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;

/// One keep-alive HTTP/1.1 connection.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    key: String,
}

impl Connection {
    async fn open(base: &str, key: &str) -> anyhow::Result<Self> {
        let addr = base.trim_start_matches("http://");
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Self {
            sender,
            key: key.to_owned(),
        })
    }

    /// `n` connections, opened one after another.
    async fn open_many(base: &str, key: &str, n: usize) -> anyhow::Result<Vec<Self>> {
        let mut connections = Vec::with_capacity(n);
        for _ in 0..n {
            connections.push(Self::open(base, key).await?);
        }
        Ok(connections)
    }

    /// Confirms upload `id`, which must be new: answers the video.
    async fn confirm(&mut self, id: &str) -> anyhow::Result<Bytes> {
        let path = format!("/v1/uploads/{id}/confirm");
        let (status, body) = self.call(hyper::Method::POST, &path, None).await?;
        ensure!(status == 202, "confirm answered {status}");
        Ok(body)
    }

    /// Sends one request and reads the whole answer; returns its status and body.
    async fn call(
        &mut self,
        method: hyper::Method,
        path: &str,
        body: Option<&str>,
    ) -> anyhow::Result<(u16, Bytes)> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .header("authorization", format!("Bearer {}", self.key));
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request.body(Full::new(Bytes::from(body.unwrap_or("").to_owned())))?;
        self.sender.ready().await?;
        let answer = self.sender.send_request(request).await?;
        let status = answer.status().as_u16();
        let body = answer.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}

/// Creates `n` presigned uploads and PUTs 1 KiB to each; returns their ids.
pub(super) async fn prepare_uploads(
    base: &str,
    key: &str,
    n: usize,
) -> anyhow::Result<Vec<String>> {
    let http = reqwest::Client::new();
    let body = Bytes::from(vec![7u8; 1024]);
    let mut ids = Vec::with_capacity(n);
    let mut pending = futures_util::stream::iter(0..n)
        .map(|_| {
            let (http, body) = (http.clone(), body.clone());
            async move {
                let created: serde_json::Value = http
                    .post(format!("{base}/v1/uploads"))
                    .bearer_auth(key)
                    .json(&serde_json::json!({
                        "filename": "bench.mp4", "content_type": "video/mp4", "size_bytes": 1024
                    }))
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                let mut put = http.put(created["upload_url"].as_str().context("upload_url")?);
                for (name, value) in created["headers"].as_object().context("headers")? {
                    put = put.header(name, value.as_str().unwrap_or_default());
                }
                put.body(body).send().await?.error_for_status()?;
                anyhow::Ok(created["upload_id"].as_str().context("id")?.to_owned())
            }
        })
        .buffer_unordered(16);
    while let Some(id) = pending.next().await {
        ids.push(id?);
    }
    Ok(ids)
}

/// `clients` connections confirm `ids`; returns confirms/s and each confirm's latency, and
/// the video of the first.
pub(super) async fn confirm_all(
    base: &str,
    key: &str,
    ids: Vec<String>,
    clients: usize,
) -> anyhow::Result<(f64, Vec<Duration>, String)> {
    let mut shares: Vec<Vec<String>> = vec![Vec::new(); clients];
    for (i, id) in ids.into_iter().enumerate() {
        shares[i % clients].push(id);
    }
    let connections = Connection::open_many(base, key, clients).await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (mut connection, share) in connections.into_iter().zip(shares) {
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(share.len());
            let mut first_video = None;
            for id in share {
                let at = Instant::now();
                let body = connection.confirm(&id).await?;
                latencies.push(at.elapsed());
                if first_video.is_none() {
                    let video: serde_json::Value = serde_json::from_slice(&body)?;
                    first_video = video["id"].as_str().map(str::to_owned);
                }
            }
            anyhow::Ok((latencies, first_video))
        });
    }
    let mut latencies = Vec::new();
    let mut video = None;
    while let Some(done) = tasks.join_next().await {
        let (mine, first) = done??;
        latencies.extend(mine);
        video = video.or(first);
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    Ok((
        rate,
        latencies,
        video.context("no confirm answered a video")?,
    ))
}

/// `clients` connections confirm `ids` at `offered` a second, confirm i due at i / offered
/// on connection i mod `clients`; returns the rate achieved and each confirm's latency from
/// the moment it was due, or from when it went if its connection was free then.
pub(super) async fn confirm_paced(
    base: &str,
    key: &str,
    ids: Vec<String>,
    clients: usize,
    offered: f64,
) -> anyhow::Result<(f64, Vec<Duration>)> {
    let connections = Connection::open_many(base, key, clients).await?;
    let gap = Duration::from_secs_f64(1.0 / offered);
    let count = ids.len();
    let mut shares: Vec<Vec<(Duration, String)>> = vec![Vec::new(); clients];
    for (i, id) in ids.into_iter().enumerate() {
        shares[i % clients].push((gap.mul_f64(i as f64), id));
    }
    let started = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (mut connection, share) in connections.into_iter().zip(shares) {
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(share.len());
            let mut free_since = started;
            for (after, id) in share {
                let due = started + after;
                tokio::time::sleep_until(due).await;
                // A confirm that waited for its connection counts from when it was due. One
                // whose connection was free counts from when it went: the timer wakes up to
                // a millisecond late, which is the load generator's delay, not the API's.
                let from = if free_since > due {
                    due
                } else {
                    tokio::time::Instant::now()
                };
                connection.confirm(&id).await?;
                free_since = tokio::time::Instant::now();
                latencies.push(free_since - from);
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(count);
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    Ok((
        latencies.len() as f64 / started.elapsed().as_secs_f64(),
        latencies,
    ))
}

/// `clients` connections read `videos` for `seconds` (client c reads video c mod N);
/// returns reads/s and latencies.
pub(super) async fn read_for(
    base: &str,
    key: &str,
    videos: &[String],
    clients: usize,
    seconds: u64,
) -> anyhow::Result<(f64, Vec<Duration>)> {
    let connections = Connection::open_many(base, key, clients).await?;
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for (c, mut connection) in connections.into_iter().enumerate() {
        let path = format!("/v1/videos/{}", videos[c % videos.len()]);
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < until {
                let at = Instant::now();
                let (status, body) = connection.call(hyper::Method::GET, &path, None).await?;
                latencies.push(at.elapsed());
                ensure!(status == 200, "read answered {status}");
                ensure!(
                    body.windows(7).any(|w| w == b"\"ready\""),
                    "the video is not ready"
                );
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    Ok((
        latencies.len() as f64 / started.elapsed().as_secs_f64(),
        latencies,
    ))
}
