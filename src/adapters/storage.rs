//! Object storage over aws-sdk-s3: presigned URLs for clients, HEAD/PUT/GET/DELETE for vidq.
//! Works against AWS S3, MinIO and the embedded server alike. Every call is bounded
//! (`VIDQ_S3_*_TIMEOUT_*`): an S3 that never answers fails a call, it does not hang it.

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    Credentials, Region, StalledStreamProtectionConfig, timeout::TimeoutConfig,
};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::config::{S3Timeouts, StorageConfig};

mod streamed;
pub use streamed::{BodySender, Completed};

/// A storage failure: which operation on which key, with the SDK's error as the source.
#[derive(Debug, thiserror::Error)]
#[error("S3 {op} of {key:?} failed")]
pub struct StorageError {
    /// The S3 operation (`HeadObject`, `PutObject`...).
    pub op: &'static str,
    /// The key or prefix it was for.
    pub key: String,
    /// The SDK's error, with its own cause chain.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
    /// S3 or the way to it is failing (no answer in time, no connection, a 5xx or a 429),
    /// as opposed to S3 refusing this one request (a 4xx) or a local file failing: what a
    /// circuit breaker counts.
    pub outage: bool,
}

impl StorageError {
    /// S3 answered this request in a way vidq cannot use (`why`); not an outage.
    pub fn refused(op: &'static str, key: &str, why: &'static str) -> Self {
        Self::new(op, key, Refusal(why))
    }

    fn new(
        op: &'static str,
        key: &str,
        source: impl std::error::Error + Outage + Send + Sync + 'static,
    ) -> Self {
        Self {
            op,
            key: key.to_owned(),
            outage: source.is_outage(),
            source: Box::new(source),
        }
    }
}

/// An answer vidq cannot use, in words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refusal(&'static str);

impl Outage for Refusal {
    fn is_outage(&self) -> bool {
        false
    }
}

/// Whether an error is S3 failing rather than S3 refusing one request.
pub trait Outage {
    /// See [`StorageError::outage`].
    fn is_outage(&self) -> bool;
}

impl<E> Outage for aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse> {
    fn is_outage(&self) -> bool {
        use aws_sdk_s3::error::SdkError;
        match self {
            SdkError::ServiceError(e) => {
                let status = e.raw().status().as_u16();
                status >= 500 || status == 429
            }
            SdkError::ConstructionFailure(_) => false,
            // Timeouts, connection failures, an answer that could not be read.
            _ => true,
        }
    }
}

/// A local file (reading a spool file, writing a download) or a caller's stop: not S3's.
impl Outage for std::io::Error {
    fn is_outage(&self) -> bool {
        false
    }
}

/// The body of an answer broke off mid-stream: the network or S3.
impl Outage for aws_sdk_s3::primitives::ByteStreamError {
    fn is_outage(&self) -> bool {
        true
    }
}

/// A request vidq could not even build.
impl Outage for aws_sdk_s3::error::BuildError {
    fn is_outage(&self) -> bool {
        false
    }
}

impl Outage for aws_sdk_s3::presigning::PresigningConfigError {
    fn is_outage(&self) -> bool {
        false
    }
}

/// Files above this size go up as multipart uploads.
pub const MULTIPART_THRESHOLD: u64 = 8 * 1024 * 1024;
/// Part size of multipart uploads: the most memory one upload holds at a time.
pub const PART_SIZE: usize = 8 * 1024 * 1024;

/// Static credentials for servers vidq starts itself (the embedded S3 in `vidq dev`).
#[derive(Clone, Debug)]
pub struct StaticCredentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: crate::config::Secret,
}

/// What HEAD says of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectHead {
    /// Size in bytes.
    pub size: i64,
    /// The SHA-256 (hex) vidq stored the object with ([`SHA256_METADATA`]), if it did.
    pub sha256: Option<String>,
}

/// The user-metadata key (`x-amz-meta-vidq-sha256`) vidq stores a content digest under, so a
/// later HEAD can say which bytes an object holds, not only how many.
pub const SHA256_METADATA: &str = "vidq-sha256";

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject {
    /// Its key.
    pub key: String,
    /// Size in bytes.
    pub size: i64,
    /// When it was last written, by the storage's clock.
    pub last_modified: chrono::DateTime<chrono::Utc>,
}

/// A presigned PUT: the URL and the headers the client must send with it.
#[derive(Clone, Debug)]
pub struct PresignedPut {
    /// Where to PUT.
    pub url: String,
    /// Headers that are part of the signature.
    pub headers: Vec<(String, String)>,
}

/// The bucket, through an S3 client (and a second client that signs URLs for the public
/// endpoint, when clients reach S3 at another address than vidq does).
#[derive(Clone, Debug)]
pub struct Storage {
    client: Client,
    presigner: Client,
    /// GETs presigned without the SDK's pipeline, when the URL shape could be learned.
    fast_get: Option<std::sync::Arc<super::presign::FastGet>>,
    bucket: String,
    transfer: TimeoutConfig,
}

/// The user metadata that carries a content digest, if there is one.
fn digest_metadata(sha256: Option<&str>) -> Option<std::collections::HashMap<String, String>> {
    sha256.map(|d| std::collections::HashMap::from([(SHA256_METADATA.to_owned(), d.to_owned())]))
}

/// The client's default bounds, meant for small calls: connect, first byte and each try, and
/// the whole call with its retries.
fn small_call_timeouts(t: &S3Timeouts) -> TimeoutConfig {
    let connect = Duration::from_millis(t.connect_ms);
    let read = Duration::from_secs(t.read_secs);
    TimeoutConfig::builder()
        .connect_timeout(connect)
        .read_timeout(read)
        .operation_attempt_timeout(connect + read)
        .operation_timeout(Duration::from_secs(t.operation_secs))
        .build()
}

/// Bounds of a call that sends a body (a PUT, one part): S3 answers only after the whole
/// body, so neither a first-byte nor a whole-call limit sized for a HEAD may apply. Each try
/// is bounded instead, and stalled-stream protection cuts a body that stops moving.
fn transfer_timeouts(t: &S3Timeouts) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(t.connect_ms))
        .disable_read_timeout()
        .disable_operation_timeout()
        .operation_attempt_timeout(Duration::from_secs(t.transfer_secs))
        .build()
}

impl Storage {
    /// Builds the clients. Credentials come from the standard AWS chain unless given.
    pub async fn connect(config: &StorageConfig, credentials: Option<StaticCredentials>) -> Self {
        let t = config.timeouts;
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .timeout_config(small_call_timeouts(&t))
            .stalled_stream_protection(
                StalledStreamProtectionConfig::enabled()
                    .grace_period(Duration::from_secs(t.stall_secs))
                    .build(),
            );
        if let Some(creds) = credentials {
            loader = loader.credentials_provider(Credentials::new(
                creds.access_key_id,
                creds.secret_access_key.expose().to_owned(),
                None,
                None,
                "vidq-static",
            ));
        }
        let shared = loader.load().await;
        let client_for = |endpoint: Option<&Url>| {
            let mut builder = aws_sdk_s3::config::Builder::from(&shared)
                .force_path_style(config.force_path_style);
            if let Some(endpoint) = endpoint {
                builder = builder.endpoint_url(endpoint.as_str().trim_end_matches('/'));
            }
            Client::from_conf(builder.build())
        };
        let client = client_for(config.endpoint.as_ref());
        let presigner = match &config.public_endpoint {
            Some(public) => client_for(Some(public)),
            None => client.clone(),
        };
        let mut storage = Self {
            client,
            presigner,
            fast_get: None,
            bucket: config.bucket.clone(),
            transfer: transfer_timeouts(&t),
        };
        storage.fast_get = storage.learn_fast_get(&shared, &config.region).await;
        storage
    }

    /// Presigns [`super::presign::PROBE_KEY`] through the SDK to learn how its URLs look,
    /// for [`super::presign::FastGet`]. `None` (every GET then presigned by the SDK) when
    /// there are no credentials yet or the URL has an unexpected shape.
    async fn learn_fast_get(
        &self,
        shared: &aws_config::SdkConfig,
        region: &str,
    ) -> Option<std::sync::Arc<super::presign::FastGet>> {
        let provider = shared.credentials_provider()?;
        let probe = self
            .sdk_presign_get(super::presign::PROBE_KEY, Duration::from_secs(60), None)
            .await;
        let shape = match probe {
            Ok(url) => super::presign::ObjectUrlShape::from_presigned(&url),
            Err(error) => {
                tracing::debug!(error = %crate::telemetry::error_chain(&error),
                    "no presign probe; GET URLs are presigned by the SDK");
                None
            }
        }?;
        Some(std::sync::Arc::new(super::presign::FastGet::new(
            shape, region, provider,
        )))
    }

    /// Per-call settings of a transfer (see [`transfer_timeouts`]).
    fn transfer_override(&self) -> aws_sdk_s3::config::Builder {
        aws_sdk_s3::config::Builder::default().timeout_config(self.transfer.clone())
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// A URL the client PUTs the object to, valid for `ttl`, signed with its content type.
    pub async fn presign_put(
        &self,
        key: &str,
        content_type: &str,
        content_length: i64,
        ttl: Duration,
    ) -> Result<PresignedPut, StorageError> {
        let presigning = PresigningConfig::expires_in(ttl)
            .map_err(|e| StorageError::new("PresignPut", key, e))?;
        let request = self
            .presigner
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .content_length(content_length)
            .presigned(presigning)
            .await
            .map_err(|e| StorageError::new("PresignPut", key, e))?;
        Ok(PresignedPut {
            url: request.uri().to_owned(),
            headers: request
                .headers()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
        })
    }

    /// A URL anyone holding it may GET the object from, valid for `ttl`.
    pub async fn presign_get(&self, key: &str, ttl: Duration) -> Result<String, StorageError> {
        if let Some(fast) = &self.fast_get {
            match fast.presign(key, ttl).await {
                Ok(url) => return Ok(url),
                Err(error) => tracing::warn!(error = %crate::telemetry::error_chain(&error),
                    "no credentials for the fast presigner; asking the SDK"),
            }
        }
        self.sdk_presign_get(key, ttl, None).await
    }

    /// [`Storage::presign_get`] through the SDK, from `start` (now if `None`).
    pub async fn sdk_presign_get(
        &self,
        key: &str,
        ttl: Duration,
        start: Option<std::time::SystemTime>,
    ) -> Result<String, StorageError> {
        let mut presigning = PresigningConfig::builder().expires_in(ttl);
        if let Some(start) = start {
            presigning = presigning.start_time(start);
        }
        let presigning = presigning
            .build()
            .map_err(|e| StorageError::new("PresignGet", key, e))?;
        let request = self
            .presigner
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .presigned(presigning)
            .await
            .map_err(|e| StorageError::new("PresignGet", key, e))?;
        Ok(request.uri().to_owned())
    }

    /// What the fast presigner makes for `key` at `now` (`None` without one): for the test
    /// that holds it to the SDK's URLs.
    pub async fn fast_presign_get_at(
        &self,
        key: &str,
        ttl: Duration,
        now: std::time::SystemTime,
    ) -> Option<String> {
        let fast = self.fast_get.as_ref()?;
        fast.presign_at(key, ttl, now).await.ok()
    }

    /// The object's size, or `None` if there is no such object.
    pub async fn head(&self, key: &str) -> Result<Option<ObjectHead>, StorageError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => Ok(Some(ObjectHead {
                size: out.content_length().unwrap_or_default(),
                sha256: out.metadata().and_then(|m| m.get(SHA256_METADATA)).cloned(),
            })),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
            Err(err) => Err(StorageError::new("HeadObject", key, err)),
        }
    }

    /// Stores a small object from memory.
    pub async fn put_bytes(
        &self,
        key: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> Result<(), StorageError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(ByteStream::from(body))
            .customize()
            .config_override(self.transfer_override())
            .send()
            .await
            .map(drop)
            .map_err(|e| StorageError::new("PutObject", key, e))
    }

    /// Stores a file from disk, streaming it: a small file in one PUT, a large one as a
    /// multipart upload of [`PART_SIZE`] parts (aborted on failure, so no parts linger).
    /// Returns the byte count sent.
    pub async fn put_file(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
    ) -> Result<u64, StorageError> {
        self.put_file_until(key, path, content_type, &CancellationToken::new())
            .await
    }

    /// [`Storage::put_file`] that gives up when `cancel` fires (a lost claim, a shutdown, a
    /// deadline). A multipart upload it started is then aborted before it returns, so no
    /// parts linger in the bucket; if the future is dropped instead, the abort is sent from a
    /// task of its own.
    pub async fn put_file_until(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
        cancel: &CancellationToken,
    ) -> Result<u64, StorageError> {
        self.put_file_tagged(key, path, content_type, None, cancel)
            .await
    }

    /// [`Storage::put_file_until`] that stores `sha256` (the file's digest, hex) with the
    /// object as [`SHA256_METADATA`], for [`Storage::head`] to report.
    pub async fn put_file_tagged(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<u64, StorageError> {
        let size = tokio::fs::metadata(path)
            .await
            .map_err(|e| StorageError::new("PutObject", key, e))?
            .len();
        if size > MULTIPART_THRESHOLD {
            return self
                .put_multipart(key, path, content_type, sha256, cancel)
                .await
                .map(|()| size);
        }
        let body = ByteStream::from_path(path)
            .await
            .map_err(|e| StorageError::new("PutObject", key, e))?;
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .set_metadata(digest_metadata(sha256))
            .content_length(i64::try_from(size).unwrap_or(i64::MAX))
            .body(body)
            .customize()
            .config_override(self.transfer_override())
            .send();
        tokio::select! {
            sent = put => sent.map_err(|e| StorageError::new("PutObject", key, e))?,
            () = cancel.cancelled() => return Err(stopped("PutObject", key)),
        };
        Ok(size)
    }

    async fn put_multipart(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<(), StorageError> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .set_metadata(digest_metadata(sha256))
            .send()
            .await
            .map_err(|e| StorageError::new("CreateMultipartUpload", key, e))?;
        let mut upload = OpenUpload {
            client: self.client.clone(),
            bucket: self.bucket.clone(),
            key: key.to_owned(),
            id: created.upload_id().unwrap_or_default().to_owned(),
            open: true,
        };
        let result = tokio::select! {
            done = self.upload_parts(key, &upload.id, path) => done,
            () = cancel.cancelled() => Err(stopped("UploadPart", key)),
        };
        match result {
            Ok(()) => upload.open = false,
            Err(_) => upload.abort().await,
        }
        result
    }

    async fn upload_parts(
        &self,
        key: &str,
        upload_id: &str,
        path: &std::path::Path,
    ) -> Result<(), StorageError> {
        let err = |op, e| StorageError::new(op, key, e);
        let mut file = tokio::fs::File::open(path)
            .await
            .map_err(|e| err("UploadPart", e))?;
        let mut parts = Vec::new();
        for number in 1.. {
            let mut chunk = Vec::with_capacity(PART_SIZE);
            (&mut file)
                .take(PART_SIZE as u64)
                .read_to_end(&mut chunk)
                .await
                .map_err(|e| err("UploadPart", e))?;
            if chunk.is_empty() {
                break;
            }
            let etag = self
                .upload_part_bytes(key, upload_id, number, ByteStream::from(chunk))
                .await?;
            parts.push((number, etag));
        }
        match self.complete_multipart(key, upload_id, &parts).await? {
            Completed::Now => Ok(()),
            // This call created the upload and nothing else completes it.
            Completed::UnknownUpload => Err(StorageError::refused(
                "CompleteMultipartUpload",
                key,
                "S3 no longer knows the multipart upload",
            )),
        }
    }

    /// Streams an object to a file, never holding more than a network buffer in memory.
    /// Returns the byte count; `None` if there is no such object.
    pub async fn download_to_file(
        &self,
        key: &str,
        path: &std::path::Path,
    ) -> Result<Option<u64>, StorageError> {
        let Some(out) = self.get_object(key).await? else {
            return Ok(None);
        };
        let mut file = tokio::fs::File::create(path)
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?;
        let mut body = out.body;
        let mut written = 0u64;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?
        {
            file.write_all(&chunk)
                .await
                .map_err(|e| StorageError::new("GetObject", key, e))?;
            written += chunk.len() as u64;
        }
        file.flush()
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?;
        Ok(Some(written))
    }

    /// Reads a small object into memory (`None` if absent).
    pub async fn get_bytes(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(out) = self.get_object(key).await? else {
            return Ok(None);
        };
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?;
        Ok(Some(bytes.to_vec()))
    }

    /// Starts a GET; `None` if there is no such object. The call ends when the headers
    /// arrive, so the small-call limits bound only that wait; stalled-stream protection cuts
    /// a body that stops moving while it is read.
    async fn get_object(
        &self,
        key: &str,
    ) -> Result<Option<aws_sdk_s3::operation::get_object::GetObjectOutput>, StorageError> {
        match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => Ok(Some(out)),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_key()) => Ok(None),
            Err(err) => Err(StorageError::new("GetObject", key, err)),
        }
    }

    /// Deletes one object (deleting an absent object succeeds, as in S3).
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map(drop)
            .map_err(|e| StorageError::new("DeleteObject", key, e))
    }

    /// Every key under a prefix.
    pub async fn list_prefix(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        Ok(self
            .list_with_sizes(prefix)
            .await?
            .into_iter()
            .map(|object| object.key)
            .collect())
    }

    /// Every object under a prefix with its size and last-modified time (`vidq reconcile`
    /// compares these with the ledger).
    pub async fn list_with_sizes(&self, prefix: &str) -> Result<Vec<ListedObject>, StorageError> {
        let mut objects = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| StorageError::new("ListObjectsV2", prefix, e))?;
            for object in page.contents() {
                let Some(key) = object.key() else { continue };
                // An object without a time counts as just written: never old enough to be
                // called an orphan.
                let last_modified = object
                    .last_modified()
                    .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
                    .unwrap_or_else(chrono::Utc::now);
                objects.push(ListedObject {
                    key: key.to_owned(),
                    size: object.size().unwrap_or_default(),
                    last_modified,
                });
            }
        }
        Ok(objects)
    }

    /// Deletes every object under a prefix, 1,000 keys a request; returns how many.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<usize, StorageError> {
        let keys = self.list_prefix(prefix).await?;
        self.delete_keys(&keys).await
    }

    /// Deletes these objects, 1,000 keys a request; returns how many.
    pub async fn delete_keys(&self, keys: &[String]) -> Result<usize, StorageError> {
        for chunk in keys.chunks(1000) {
            let prefix = chunk.first().map_or("", String::as_str);
            let objects = chunk
                .iter()
                .map(|key| ObjectIdentifier::builder().key(key).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| StorageError::new("DeleteObjects", prefix, e))?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| StorageError::new("DeleteObjects", prefix, e))?;
            let out = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| StorageError::new("DeleteObjects", prefix, e))?;
            // A 200 can still list keys S3 did not delete.
            if let Some(failed) = out.errors().first() {
                let key = failed.key().unwrap_or(prefix).to_owned();
                let why = failed.message().unwrap_or("no reason given").to_owned();
                return Err(StorageError::new(
                    "DeleteObjects",
                    &key,
                    std::io::Error::other(format!(
                        "{} keys not deleted: {why}",
                        out.errors().len()
                    )),
                ));
            }
        }
        Ok(keys.len())
    }

    /// Whether the bucket exists and these credentials may use it.
    pub async fn check_bucket(&self) -> Result<(), StorageError> {
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map(drop)
            .map_err(|e| StorageError::new("HeadBucket", &self.bucket, e))
    }

    /// Creates the bucket unless it already exists (for servers vidq runs itself).
    pub async fn ensure_bucket(&self) -> Result<(), StorageError> {
        if self.check_bucket().await.is_ok() {
            return Ok(());
        }
        match self
            .client
            .create_bucket()
            .bucket(&self.bucket)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(err)
                if err.as_service_error().is_some_and(|e| {
                    e.is_bucket_already_owned_by_you() || e.is_bucket_already_exists()
                }) =>
            {
                Ok(())
            }
            Err(err) => Err(StorageError::new("CreateBucket", &self.bucket, err)),
        }
    }
}

/// The error of a transfer stopped by its caller.
fn stopped(op: &'static str, key: &str) -> StorageError {
    StorageError::new(
        op,
        key,
        std::io::Error::new(std::io::ErrorKind::Interrupted, "stopped by the caller"),
    )
}

/// A multipart upload that was created and neither completed nor aborted yet. Dropped while
/// open (its future was dropped mid-transfer), it sends the abort from a task of its own.
struct OpenUpload {
    client: Client,
    bucket: String,
    key: String,
    id: String,
    open: bool,
}

impl OpenUpload {
    /// Aborts it, so S3 drops its parts.
    async fn abort(&mut self) {
        self.open = false;
        abort_upload(&self.client, &self.bucket, &self.key, &self.id).await;
    }
}

impl Drop for OpenUpload {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %self.key, "a multipart upload was left open; its parts stay until the bucket's lifecycle rule removes them");
            return;
        };
        let (client, bucket, key, id) = (
            self.client.clone(),
            self.bucket.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.id),
        );
        runtime.spawn(async move { abort_upload(&client, &bucket, &key, &id).await });
    }
}

/// AbortMultipartUpload, best effort: a failure is logged (the parts then stay until a
/// bucket lifecycle rule for incomplete uploads removes them).
async fn abort_upload(client: &Client, bucket: &str, key: &str, id: &str) {
    let aborted = client
        .abort_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .send()
        .await;
    if let Err(error) = aborted {
        let error = StorageError::new("AbortMultipartUpload", key, error);
        tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not abort a multipart upload");
    }
}
