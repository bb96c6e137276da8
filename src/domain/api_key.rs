//! API keys: generated from the OS's random source, shown once, stored only as a SHA-256
//! hash. A 256-bit random key needs no slow password hash: nobody can guess it, and the hash
//! lets the key be looked up by an index.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// Prefix that makes a leaked key recognisable (secret scanners, logs).
const PREFIX: &str = "vidq_";

/// A freshly generated key. Print it once; store [`ApiKey::hash`].
pub struct ApiKey(String);

impl ApiKey {
    /// 32 random bytes, hex-encoded behind the `vidq_` prefix.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        Self(format!("{PREFIX}{}", hex::encode(bytes)))
    }

    /// The key, to show its owner once.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// What the database stores and looks keys up by.
    pub fn hash(&self) -> [u8; 32] {
        hash_presented_key(&self.0)
    }
}

/// Hash of a key presented in an `Authorization` header.
pub fn hash_presented_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Whether `text` has the shape of a key vidq made (an API key or a stream key), with or
/// without a file extension after it (`vidq_<64 hex>.m3u8`): for hiding keys in logs.
pub fn looks_like_key(text: &str) -> bool {
    let Some(rest) = text.strip_prefix(PREFIX) else {
        return false;
    };
    let hex = rest.split('.').next().unwrap_or_default();
    hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_unique_and_hash_consistently() {
        let a = ApiKey::generate();
        let b = ApiKey::generate();
        assert_ne!(a.reveal(), b.reveal());
        assert!(a.reveal().starts_with("vidq_"));
        assert_eq!(a.reveal().len(), 5 + 64);
        assert_eq!(a.hash(), hash_presented_key(a.reveal()));
        assert_ne!(a.hash(), b.hash());
    }
}
