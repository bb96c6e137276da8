//! tus 1.0.0 (resumable uploads) on the wire: the version, the extensions vidq speaks, and
//! the parsing of the headers a client sends (`Upload-Metadata`, `Upload-Checksum`,
//! `Upload-Length`, `Upload-Offset`). Pure: the HTTP layer hands strings in, gets typed
//! values or a [`TusHeaderError`] out.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The one protocol version vidq speaks (`Tus-Resumable`, `Tus-Version`).
pub const VERSION: &str = "1.0.0";

/// `Tus-Extension`: what a client may use besides the core protocol.
pub const EXTENSIONS: &str = "creation,creation-with-upload,termination,checksum,expiration";

/// `Tus-Checksum-Algorithm`.
pub const CHECKSUM_ALGORITHMS: &str = "sha1,sha256";

/// The content type every PATCH (and a POST carrying the first bytes) must have.
pub const PATCH_CONTENT_TYPE: &str = "application/offset+octet-stream";

/// A hash algorithm a client may name in `Upload-Checksum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChecksumAlgorithm {
    /// SHA-1 (the extension requires it).
    Sha1,
    /// SHA-256.
    Sha256,
}

impl ChecksumAlgorithm {
    /// The spelling in headers and in the ledger's `checksum` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sha1 => "sha1",
            Self::Sha256 => "sha256",
        }
    }

    fn digest_len(self) -> usize {
        match self {
            Self::Sha1 => 20,
            Self::Sha256 => 32,
        }
    }
}

/// A digest being computed over bytes as they pass, to compare with a [`Checksum`].
pub enum ChecksumHasher {
    /// SHA-1.
    Sha1(sha1::Sha1),
    /// SHA-256.
    Sha256(sha2::Sha256),
}

impl ChecksumHasher {
    /// A fresh digest of `algorithm`.
    pub fn new(algorithm: ChecksumAlgorithm) -> Self {
        use sha1::Digest as _;
        match algorithm {
            ChecksumAlgorithm::Sha1 => Self::Sha1(sha1::Sha1::new()),
            ChecksumAlgorithm::Sha256 => Self::Sha256(sha2::Sha256::new()),
        }
    }

    /// Adds bytes.
    pub fn update(&mut self, data: &[u8]) {
        use sha1::Digest as _;
        match self {
            Self::Sha1(h) => h.update(data),
            Self::Sha256(h) => h.update(data),
        }
    }

    /// The raw digest of everything added.
    pub fn finish(self) -> Vec<u8> {
        use sha1::Digest as _;
        match self {
            Self::Sha1(h) => h.finalize().to_vec(),
            Self::Sha256(h) => h.finalize().to_vec(),
        }
    }
}

/// An expected digest of some bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checksum {
    /// How it was computed.
    pub algorithm: ChecksumAlgorithm,
    /// The raw digest.
    pub digest: Vec<u8>,
}

impl Checksum {
    /// `sha256:<hex>`, as the ledger stores a whole file's checksum.
    pub fn to_ledger(&self) -> String {
        format!("{}:{}", self.algorithm.as_str(), hex::encode(&self.digest))
    }

    /// Parses the ledger (and API) spelling `sha1:<hex>` or `sha256:<hex>`.
    pub fn from_ledger(raw: &str) -> Result<Self, TusHeaderError> {
        let (name, digest) = raw.split_once(':').ok_or(TusHeaderError::Checksum(
            "write it as `sha256:<hex digest>`",
        ))?;
        let algorithm = algorithm(name)?;
        let digest = hex::decode(digest.trim())
            .map_err(|_| TusHeaderError::Checksum("the digest must be hexadecimal"))?;
        checked(algorithm, digest)
    }
}

/// A tus header that does not parse; the message says what was expected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TusHeaderError {
    /// `Upload-Length` or `Upload-Offset` is missing or not a whole number.
    #[error("the {0} header must be a whole number of bytes")]
    Number(&'static str),
    /// `Upload-Metadata` is malformed.
    #[error(
        "Upload-Metadata must be comma-separated `key base64value` pairs with unique keys: {0}"
    )]
    Metadata(&'static str),
    /// `Upload-Checksum` is malformed.
    #[error("the checksum is malformed: {0}")]
    Checksum(&'static str),
    /// `Upload-Checksum` names an algorithm vidq does not compute.
    #[error("checksum algorithm {0:?} is not supported (supported: sha1, sha256)")]
    UnsupportedAlgorithm(String),
}

fn algorithm(name: &str) -> Result<ChecksumAlgorithm, TusHeaderError> {
    match name.trim().to_ascii_lowercase().as_str() {
        "sha1" => Ok(ChecksumAlgorithm::Sha1),
        "sha256" => Ok(ChecksumAlgorithm::Sha256),
        other => Err(TusHeaderError::UnsupportedAlgorithm(other.to_owned())),
    }
}

fn checked(algorithm: ChecksumAlgorithm, digest: Vec<u8>) -> Result<Checksum, TusHeaderError> {
    if digest.len() != algorithm.digest_len() {
        return Err(TusHeaderError::Checksum(
            "the digest has the wrong length for its algorithm",
        ));
    }
    Ok(Checksum { algorithm, digest })
}

/// `Upload-Checksum: <algorithm> <base64 digest>`.
pub fn parse_checksum(raw: &str) -> Result<Checksum, TusHeaderError> {
    let (name, digest) = raw.trim().split_once(' ').ok_or(TusHeaderError::Checksum(
        "write it as `<algorithm> <base64 digest>`",
    ))?;
    let algorithm = algorithm(name)?;
    let digest = STANDARD
        .decode(digest.trim())
        .map_err(|_| TusHeaderError::Checksum("the digest must be base64"))?;
    checked(algorithm, digest)
}

/// `Upload-Length` / `Upload-Offset`: a non-negative whole number.
pub fn parse_bytes(header: &'static str, raw: Option<&str>) -> Result<u64, TusHeaderError> {
    let raw = raw.ok_or(TusHeaderError::Number(header))?.trim();
    // `u64::from_str` takes a leading `+`, which the protocol's grammar does not.
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(TusHeaderError::Number(header));
    }
    raw.parse().map_err(|_| TusHeaderError::Number(header))
}

/// What vidq reads of `Upload-Metadata`: the label and the media type. Other keys are
/// accepted and ignored, as the protocol asks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// `filename`.
    pub filename: Option<String>,
    /// `filetype`: the media type, checked like a presigned contract's `content_type`.
    pub filetype: Option<String>,
}

/// Parses `Upload-Metadata` (`key base64value` pairs; a key may come without a value).
pub fn parse_metadata(raw: Option<&str>) -> Result<Metadata, TusHeaderError> {
    let mut metadata = Metadata::default();
    let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else {
        return Ok(metadata);
    };
    let mut seen = std::collections::HashSet::new();
    for pair in raw.split(',') {
        let mut parts = pair.trim().split(' ');
        let key = parts.next().unwrap_or_default();
        let value = parts.next();
        if key.is_empty() || parts.next().is_some() {
            return Err(TusHeaderError::Metadata(
                "a pair has an empty key or extra spaces",
            ));
        }
        if !seen.insert(key.to_owned()) {
            return Err(TusHeaderError::Metadata("a key appears twice"));
        }
        let value = match value {
            Some(v) => {
                let bytes = STANDARD
                    .decode(v)
                    .map_err(|_| TusHeaderError::Metadata("a value is not base64"))?;
                Some(
                    String::from_utf8(bytes)
                        .map_err(|_| TusHeaderError::Metadata("a value is not UTF-8"))?,
                )
            }
            None => None,
        };
        match key {
            "filename" => metadata.filename = value,
            "filetype" => metadata.filetype = value,
            _ => {}
        }
    }
    Ok(metadata)
}

/// `Upload-Metadata` for what vidq knows of an upload (HEAD echoes it).
pub fn format_metadata(filename: &str, filetype: &str) -> String {
    format!(
        "filename {},filetype {}",
        STANDARD.encode(filename),
        STANDARD.encode(filetype)
    )
}

/// An HTTP date (`Upload-Expires`), e.g. `Wed, 02 Dec 2026 04:00:00 GMT`.
pub fn http_date(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_pairs_decode_and_unknown_keys_are_ignored() {
        let raw = format!(
            "filename {},filetype {},is_confidential,other {}",
            STANDARD.encode("my clip.mp4"),
            STANDARD.encode("video/mp4"),
            STANDARD.encode("x")
        );
        let m = parse_metadata(Some(&raw)).unwrap();
        assert_eq!(m.filename.as_deref(), Some("my clip.mp4"));
        assert_eq!(m.filetype.as_deref(), Some("video/mp4"));
        assert_eq!(parse_metadata(None).unwrap(), Metadata::default());
        let echoed = parse_metadata(Some(&format_metadata("a.mp4", "video/webm"))).unwrap();
        assert_eq!(echoed.filename.as_deref(), Some("a.mp4"));
        assert_eq!(echoed.filetype.as_deref(), Some("video/webm"));
    }

    #[test]
    fn malformed_metadata_is_refused() {
        for bad in ["filename !!!", "filename YQ==,filename Yg==", " a b c", ","] {
            assert!(parse_metadata(Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn checksums_parse_with_their_algorithm_and_length() {
        let sha1 = parse_checksum("sha1 Kq5sNclPz7QV2+lfQIuc6R7oRu0=").unwrap();
        assert_eq!(sha1.algorithm, ChecksumAlgorithm::Sha1);
        assert_eq!(sha1.digest.len(), 20);
        assert_eq!(
            parse_checksum("md5 1B2M2Y8AsgTpgAmY7PhCfg=="),
            Err(TusHeaderError::UnsupportedAlgorithm("md5".into()))
        );
        assert!(parse_checksum("sha256 Kq5sNclPz7QV2+lfQIuc6R7oRu0=").is_err());
        assert!(parse_checksum("sha1").is_err());
        assert!(parse_checksum("sha1 not*base64").is_err());
        let ledger = Checksum::from_ledger(&format!("sha256:{}", "ab".repeat(32))).unwrap();
        assert_eq!(ledger.to_ledger(), format!("sha256:{}", "ab".repeat(32)));
        assert!(Checksum::from_ledger("sha256:zz").is_err());
    }

    #[test]
    fn byte_counts_are_plain_digits() {
        assert_eq!(parse_bytes("Upload-Offset", Some("0")), Ok(0));
        assert_eq!(parse_bytes("Upload-Length", Some(" 1024 ")), Ok(1024));
        for bad in [
            None,
            Some(""),
            Some("-1"),
            Some("+5"),
            Some("1e3"),
            Some("99999999999999999999"),
        ] {
            assert!(parse_bytes("Upload-Offset", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn http_dates_are_imf_fixdate() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-02T04:05:06Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(http_date(at), "Wed, 02 Dec 2026 04:05:06 GMT");
    }
}
