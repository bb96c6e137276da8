//! Object storage over aws-sdk-s3: presigned URLs for clients, HEAD/PUT/GET/DELETE for vidq.
//! Works against AWS S3, MinIO and the embedded server alike. Every call is bounded
//! (`VIDQ_S3_*_TIMEOUT_*`): an S3 that never answers fails a call, it does not hang it.
//!
//! This file holds the client set-up and the types callers see; the [`Storage`] methods are
//! spread over submodules by what they touch: presigned URLs (`presigning`), one object
//! (`objects`), many objects and the bucket (`bucket`), and bodies streamed as they arrive
//! for the `s3` tus store (`streamed`). Every failure is a [`StorageError`] (`error`).

use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    Credentials, Region, StalledStreamProtectionConfig, timeout::TimeoutConfig,
};
use url::Url;

use crate::config::{CaCertificates, S3Timeouts, StorageConfig};

mod bucket;
mod error;
mod objects;
mod presigning;
mod streamed;

pub use error::{Outage, StorageError};
pub use streamed::{BodySender, Completed};

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

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenMultipart {
    /// The key it will complete on.
    pub key: String,
    /// S3's id of it.
    pub id: String,
    /// When it was begun, by the storage's clock, where the listing says.
    pub initiated: Option<chrono::DateTime<chrono::Utc>>,
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
    /// `VIDQ_S3_PREFIX`: every key this deployment uses is under it ("" or ending in `/`).
    prefix: String,
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

/// The SDK's own HTTPS client (rustls), trusting `ca` besides the system's roots. The
/// certificates were parsed when the setting was read, so building cannot fail on them.
fn https_client_trusting(ca: &CaCertificates) -> aws_sdk_s3::config::SharedHttpClient {
    use aws_smithy_http_client::tls;
    // The system's roots stay trusted (the SDK reads them once per process; a system
    // without any is warned about in its log).
    let trust = tls::TrustStore::default().with_pem_certificate(ca.pem.as_bytes());
    let context = tls::TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .expect("CA certificates are checked when the setting is read");
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(context)
        .build_https()
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
        if let Some(ca) = &config.ca {
            loader = loader.http_client(https_client_trusting(ca));
        }
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
            prefix: String::new(),
            transfer: transfer_timeouts(&t),
        };
        // The URL shape is learned from a key in the bucket's root; the prefix is part of
        // every key given to the fast presigner afterwards.
        storage.fast_get = storage.learn_fast_get(&shared, &config.region).await;
        storage.prefix = config.prefix.clone();
        storage
    }

    /// Per-call settings of a transfer (see [`transfer_timeouts`]).
    fn transfer_override(&self) -> aws_sdk_s3::config::Builder {
        aws_sdk_s3::config::Builder::default().timeout_config(self.transfer.clone())
    }

    /// The bucket's name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The prefix every key of this deployment is under ("" or ending in `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Where `key` is in the bucket: under the deployment's prefix. Every call to S3 goes
    /// through this, so no key of vidq's can land outside the prefix.
    pub fn at(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The deployment's key of an object listed in the bucket; `None` outside the prefix.
    fn within<'k>(&self, in_bucket: &'k str) -> Option<&'k str> {
        in_bucket.strip_prefix(self.prefix.as_str())
    }
}
