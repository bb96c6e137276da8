//! Presigned GET URLs made without the SDK's request pipeline: AWS Signature Version 4 in
//! the query string, with the day's signing key kept.
//!
//! Every read of a ready video hands out presigned URLs, and the SDK builds each one as a
//! whole request (endpoint resolution, interceptors, a fresh signing key: four HMACs before
//! the signature's own). This signer learns the object URL's shape once from the SDK (scheme,
//! host, path style, bucket) and then only encodes the key and computes one canonical request
//! hash and one HMAC per URL. For the same key, time and lifetime its URL has the SDK's
//! origin, path, query parameters and signature (only the parameters' order differs); a test
//! holds it to that.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_sdk_s3::config::Credentials;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::sync::Locked;

type HmacSha256 = Hmac<Sha256>;

/// Where objects live, as the SDK addresses them: `{origin}{prefix}{encoded key}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectUrlShape {
    /// `scheme://host[:port]`.
    pub origin: String,
    /// The `Host` header the signature covers.
    pub host: String,
    /// The path before the key: `/{bucket}/` (path style) or `/` (virtual host).
    pub prefix: String,
}

impl ObjectUrlShape {
    /// Reads the shape off a URL the SDK presigned for the key [`PROBE_KEY`].
    pub fn from_presigned(url: &str) -> Option<Self> {
        let parsed = url::Url::parse(url).ok()?;
        let host = match parsed.port() {
            Some(port) => format!("{}:{port}", parsed.host_str()?),
            None => parsed.host_str()?.to_owned(),
        };
        let prefix = parsed.path().strip_suffix(PROBE_KEY)?.to_owned();
        Some(Self {
            origin: format!("{}://{host}", parsed.scheme()),
            host,
            prefix,
        })
    }
}

/// The key the shape is learned from (plain characters only, so it is not encoded).
pub const PROBE_KEY: &str = "vidq-presign-probe";

/// Presigns GETs for one bucket and region.
pub struct GetSigner {
    shape: ObjectUrlShape,
    region: String,
    /// The signing key of one day and secret (`kSigning`), derived on first use that day.
    day_key: Mutex<Option<DayKey>>,
}

struct DayKey {
    day: String,
    access_key_id: String,
    key: [u8; 32],
}

impl GetSigner {
    /// A signer for objects shaped like `shape` in `region`.
    pub fn new(shape: ObjectUrlShape, region: &str) -> Self {
        Self {
            shape,
            region: region.to_owned(),
            day_key: Mutex::new(None),
        }
    }

    /// A URL anyone holding it may GET `key` from, from `now` for `ttl`.
    pub fn presign(
        &self,
        credentials: &Credentials,
        key: &str,
        now: SystemTime,
        ttl: Duration,
    ) -> String {
        let at = chrono::DateTime::<chrono::Utc>::from(now);
        let stamp = at.format("%Y%m%dT%H%M%SZ").to_string();
        let day = &stamp[..8];
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        let path = format!("{}{}", self.shape.prefix, encode(key, false));
        // Query parameters in byte order of their names, as the canonical request wants.
        let mut query = String::with_capacity(512);
        query.push_str("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=");
        query.push_str(&encode(
            &format!("{}/{scope}", credentials.access_key_id()),
            true,
        ));
        let _ = write!(query, "&X-Amz-Date={stamp}&X-Amz-Expires={}", ttl.as_secs());
        if let Some(token) = credentials.session_token() {
            query.push_str("&X-Amz-Security-Token=");
            query.push_str(&encode(token, true));
        }
        query.push_str("&X-Amz-SignedHeaders=host&x-id=GetObject");
        let canonical = format!(
            "GET\n{path}\n{query}\nhost:{}\n\nhost\nUNSIGNED-PAYLOAD",
            self.shape.host
        );
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let signing_key = self.signing_key(credentials, day);
        let signature = hex::encode(hmac(&signing_key, to_sign.as_bytes()));
        format!(
            "{}{path}?{query}&X-Amz-Signature={signature}",
            self.shape.origin
        )
    }

    /// `kSigning` for `day`: HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), "s3"),
    /// "aws4_request"), kept until the day or the access key changes (a new secret always
    /// comes with a new key id, temporary credentials included).
    fn signing_key(&self, credentials: &Credentials, day: &str) -> [u8; 32] {
        let mut kept = self.day_key.locked();
        if let Some(k) = kept.as_ref()
            && k.day == day
            && k.access_key_id == credentials.access_key_id()
        {
            return k.key;
        }
        let secret = format!("AWS4{}", credentials.secret_access_key());
        let key = [
            day.as_bytes(),
            self.region.as_bytes(),
            b"s3",
            b"aws4_request",
        ]
        .iter()
        .fold(secret.into_bytes(), |key, part| hmac(&key, part).to_vec());
        let key: [u8; 32] = key.try_into().expect("HMAC-SHA256 is 32 bytes");
        *kept = Some(DayKey {
            day: day.to_owned(),
            access_key_id: credentials.access_key_id().to_owned(),
            key,
        });
        key
    }
}

impl std::fmt::Debug for GetSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GetSigner")
            .field("shape", &self.shape)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// A [`GetSigner`] with the credentials it signs with, taken from the SDK's provider and kept
/// until five minutes before they expire (static keys never do).
#[derive(Debug)]
pub struct FastGet {
    signer: GetSigner,
    provider: aws_credential_types::provider::SharedCredentialsProvider,
    kept: tokio::sync::Mutex<Option<Credentials>>,
}

/// How long before their expiry kept credentials are fetched again.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);

impl FastGet {
    /// Signs for `shape` in `region` with what `provider` gives.
    pub fn new(
        shape: ObjectUrlShape,
        region: &str,
        provider: aws_credential_types::provider::SharedCredentialsProvider,
    ) -> Self {
        Self {
            signer: GetSigner::new(shape, region),
            provider,
            kept: tokio::sync::Mutex::new(None),
        }
    }

    /// A URL to GET `key` for `ttl` from now.
    pub async fn presign(
        &self,
        key: &str,
        ttl: Duration,
    ) -> Result<String, aws_credential_types::provider::error::CredentialsError> {
        self.presign_at(key, ttl, SystemTime::now()).await
    }

    /// A URL to GET `key` for `ttl` from `now`.
    pub async fn presign_at(
        &self,
        key: &str,
        ttl: Duration,
        now: SystemTime,
    ) -> Result<String, aws_credential_types::provider::error::CredentialsError> {
        use aws_credential_types::provider::ProvideCredentials;
        let credentials = {
            let mut kept = self.kept.lock().await;
            let fresh = kept
                .as_ref()
                .is_some_and(|c| c.expiry().is_none_or(|at| at > now + REFRESH_BEFORE_EXPIRY));
            if !fresh {
                *kept = Some(self.provider.provide_credentials().await?);
            }
            kept.clone().expect("just filled")
        };
        Ok(self.signer.presign(&credentials, key, now, ttl))
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// SigV4's URI encoding: every byte but `A-Z a-z 0-9 - . _ ~` as `%XX`, and `/` too when
/// `slash` (query values) but not in a path.
fn encode(text: &str, slash: bool) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(byte as char);
            }
            b'/' if !slash => out.push('/'),
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_encoded_like_sigv4_wants_in_a_path_and_in_a_query() {
        assert_eq!(
            encode("videos/a b/ü+~.m3u8", false),
            "videos/a%20b/%C3%BC%2B~.m3u8"
        );
        assert_eq!(
            encode("AKID/20261201/us-east-1/s3", true),
            "AKID%2F20261201%2Fus-east-1%2Fs3"
        );
    }

    #[test]
    fn the_shape_is_read_off_a_path_style_and_a_virtual_host_url() {
        let path_style = ObjectUrlShape::from_presigned(
            "http://127.0.0.1:9000/bucket/vidq-presign-probe?X-Amz-Algorithm=x",
        )
        .unwrap();
        assert_eq!(path_style.origin, "http://127.0.0.1:9000");
        assert_eq!(path_style.host, "127.0.0.1:9000");
        assert_eq!(path_style.prefix, "/bucket/");
        let virtual_host = ObjectUrlShape::from_presigned(
            "https://bucket.s3.eu-west-1.amazonaws.com/vidq-presign-probe?x=1",
        )
        .unwrap();
        assert_eq!(virtual_host.host, "bucket.s3.eu-west-1.amazonaws.com");
        assert_eq!(virtual_host.prefix, "/");
    }
}
