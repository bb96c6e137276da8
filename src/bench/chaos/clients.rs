//! Upload clients that behave as real ones do: presigned (create, PUT to S3, confirm) and tus
//! (create, PATCH in two pieces, HEAD to find the offset after any failure). Each retries a
//! lost connection, a 5xx, a 408 or a 429 with a growing pause (honouring `Retry-After`) and
//! counts every answer the API gave; an upload counts as confirmed once the API said so: a
//! confirm's 2xx, or the tus PATCH that reached the full length.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use reqwest::{RequestBuilder, Response, StatusCode};
use tokio_util::sync::CancellationToken;

use crate::domain::ids::UploadId;
use crate::sync::Locked;

/// What the clients did and saw.
#[derive(Default)]
pub struct Tally {
    /// Uploads confirmed through presigned URLs.
    pub presigned: AtomicU32,
    /// Uploads completed through tus.
    pub tus: AtomicU32,
    /// The uploads the API confirmed, by id.
    pub confirmed: Mutex<Vec<UploadId>>,
    /// Every status the API answered, with how often.
    pub statuses: Mutex<BTreeMap<u16, u32>>,
    /// Requests to the API or S3 that got no answer (refused, reset, timed out).
    pub no_answer: AtomicU32,
    /// Uploads given up on an answer no retry can change (with what it was).
    pub refused: Mutex<Vec<String>>,
}

impl Tally {
    fn saw(&self, status: StatusCode) {
        *self.statuses.locked().entry(status.as_u16()).or_default() += 1;
    }

    /// How many answers of `status` the API gave.
    pub fn count(&self, status: u16) -> u32 {
        self.statuses.locked().get(&status).copied().unwrap_or(0)
    }
}

/// What one client needs.
pub struct Client {
    /// The API's base URL.
    pub api: String,
    /// The uploader's API key.
    pub key: String,
    /// The clip every upload sends.
    pub clip: Vec<u8>,
    /// HTTP client (no pool sharing between kills matters: retries reconnect).
    pub http: reqwest::Client,
    /// Distinct `video.ready` events the receiver verified.
    pub ready: Arc<AtomicU32>,
    /// Uploads confirmed and not yet announced READY, at most, before a client starts
    /// another: the soak keeps the workers busy without outrunning them.
    pub backlog: u32,
}

/// Why an upload ended without being confirmed.
enum Ended {
    /// The run's end came first.
    GaveUp,
    /// An answer no retry changes.
    Refused(String),
}

impl Client {
    /// Uploads, alternating presigned and tus, until `stop_new`; an upload under way when
    /// it fires is finished (retrying until `give_up`).
    pub async fn run(
        &self,
        first_tus: bool,
        tally: &Tally,
        stop_new: &CancellationToken,
        give_up: &CancellationToken,
    ) {
        let mut tus = first_tus;
        while !stop_new.is_cancelled() {
            let confirmed =
                tally.presigned.load(Ordering::Relaxed) + tally.tus.load(Ordering::Relaxed);
            if confirmed.saturating_sub(self.ready.load(Ordering::Relaxed)) >= self.backlog {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let done = if tus {
                self.tus(tally, give_up).await
            } else {
                self.presigned(tally, give_up).await
            };
            match done {
                Ok(id) => {
                    let counter = if tus { &tally.tus } else { &tally.presigned };
                    counter.fetch_add(1, Ordering::Relaxed);
                    tally.confirmed.locked().push(id);
                }
                Err(Ended::GaveUp) => return,
                Err(Ended::Refused(why)) => tally.refused.locked().push(why),
            }
            tus = !tus;
        }
    }

    async fn presigned(
        &self,
        tally: &Tally,
        give_up: &CancellationToken,
    ) -> Result<UploadId, Ended> {
        let body = serde_json::json!({
            "filename": "chaos.mp4",
            "content_type": "video/mp4",
            "size_bytes": self.clip.len(),
        });
        let created = self
            .retrying(tally, give_up, true, || {
                self.http
                    .post(format!("{}/v1/uploads", self.api))
                    .bearer_auth(&self.key)
                    .json(&body)
            })
            .await?;
        let contract: serde_json::Value = expect(created, StatusCode::CREATED, "create").await?;
        let id = upload_id_of(&contract["upload_id"])?;
        let url = contract["upload_url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let put = self
            .retrying(tally, give_up, false, || {
                let mut put = self.http.put(&url).body(self.clip.clone());
                if let Some(headers) = contract["headers"].as_object() {
                    for (name, value) in headers {
                        put = put.header(name, value.as_str().unwrap_or_default());
                    }
                }
                put
            })
            .await?;
        if !put.status().is_success() {
            return Err(Ended::Refused(format!("S3 PUT answered {}", put.status())));
        }
        let confirm = self
            .retrying(tally, give_up, true, || {
                self.http
                    .post(format!("{}/v1/uploads/{id}/confirm", self.api))
                    .bearer_auth(&self.key)
            })
            .await?;
        match confirm.status() {
            StatusCode::ACCEPTED | StatusCode::OK => Ok(id),
            other => Err(Ended::Refused(format!(
                "confirm answered {other}: {}",
                confirm.text().await.unwrap_or_default()
            ))),
        }
    }

    async fn tus(&self, tally: &Tally, give_up: &CancellationToken) -> Result<UploadId, Ended> {
        let length = self.clip.len();
        let metadata = format!(
            "filename {},filetype {}",
            STANDARD.encode("chaos.mp4"),
            STANDARD.encode("video/mp4")
        );
        let created = self
            .retrying(tally, give_up, true, || {
                self.tus_request(reqwest::Method::POST, &format!("{}/v1/tus/", self.api))
                    .header("Upload-Length", length.to_string())
                    .header("Upload-Metadata", &metadata)
            })
            .await?;
        if created.status() != StatusCode::CREATED {
            return Err(Ended::Refused(format!(
                "tus creation answered {}",
                created.status()
            )));
        }
        let location = created
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let url = if location.starts_with("http") {
            location
        } else {
            format!("{}{location}", self.api)
        };
        let id = upload_id_of(&serde_json::Value::from(
            url.rsplit('/').next().unwrap_or_default(),
        ))?;
        let piece = length.div_ceil(2);
        let mut offset = 0;
        while offset < length {
            if give_up.is_cancelled() {
                return Err(Ended::GaveUp);
            }
            let end = (offset + piece).min(length);
            let sent = self
                .tus_request(reqwest::Method::PATCH, &url)
                .header("Upload-Offset", offset.to_string())
                .header("Content-Type", "application/offset+octet-stream")
                .body(self.clip[offset..end].to_vec())
                .send()
                .await;
            let answered = match sent {
                Ok(response) => {
                    tally.saw(response.status());
                    (response.status() == StatusCode::NO_CONTENT)
                        .then(|| upload_offset(&response))
                        .flatten()
                }
                Err(_) => {
                    tally.no_answer.fetch_add(1, Ordering::Relaxed);
                    None
                }
            };
            offset = match answered {
                Some(now) => now,
                // Whatever happened, the server knows how much it kept: ask it.
                None => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let head = self
                        .retrying(tally, give_up, true, || {
                            self.tus_request(reqwest::Method::HEAD, &url)
                        })
                        .await?;
                    if head.status() != StatusCode::OK {
                        return Err(Ended::Refused(format!(
                            "tus HEAD answered {}",
                            head.status()
                        )));
                    }
                    upload_offset(&head)
                        .ok_or_else(|| Ended::Refused("tus HEAD without Upload-Offset".into()))?
                }
            };
        }
        Ok(id)
    }

    fn tus_request(&self, method: reqwest::Method, url: &str) -> RequestBuilder {
        self.http
            .request(method, url)
            .bearer_auth(&self.key)
            .header("Tus-Resumable", "1.0.0")
    }

    /// Sends what `request` builds until it is answered with anything but a lost
    /// connection, a 5xx, a 408 or a 429; `api`: the answers are the API's (tallied).
    async fn retrying(
        &self,
        tally: &Tally,
        give_up: &CancellationToken,
        api: bool,
        request: impl Fn() -> RequestBuilder,
    ) -> Result<Response, Ended> {
        let mut pause = Duration::from_millis(100);
        loop {
            if give_up.is_cancelled() {
                return Err(Ended::GaveUp);
            }
            let wait = match request().send().await {
                Ok(response) => {
                    let status = response.status();
                    if api {
                        tally.saw(status);
                    }
                    let again = status.is_server_error()
                        || status == StatusCode::REQUEST_TIMEOUT
                        || status == StatusCode::TOO_MANY_REQUESTS;
                    if !again {
                        return Ok(response);
                    }
                    retry_after(&response).unwrap_or(pause)
                }
                Err(_) => {
                    tally.no_answer.fetch_add(1, Ordering::Relaxed);
                    pause
                }
            };
            tokio::select! {
                () = give_up.cancelled() => return Err(Ended::GaveUp),
                () = tokio::time::sleep(wait) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

async fn expect(
    response: Response,
    want: StatusCode,
    what: &str,
) -> Result<serde_json::Value, Ended> {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if status != want {
        return Err(Ended::Refused(format!("{what} answered {status}: {text}")));
    }
    serde_json::from_str(&text).map_err(|e| Ended::Refused(format!("{what}: {e}: {text}")))
}

fn upload_id_of(value: &serde_json::Value) -> Result<UploadId, Ended> {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Ended::Refused(format!("no upload id in {value}")))
}

fn upload_offset(response: &Response) -> Option<usize> {
    response
        .headers()
        .get("upload-offset")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A `Retry-After` in seconds, at most 5 s (a client of a soak does not wait longer).
fn retry_after(response: &Response) -> Option<Duration> {
    let seconds: u64 = response
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds.min(5)))
}
