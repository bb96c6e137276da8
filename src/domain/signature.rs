//! Standard Webhooks signing: `whsec_` secrets and `v1,` HMAC-SHA256 signatures over
//! `{id}.{timestamp}.{body}`.
//!
//! A secret is `whsec_` followed by the base64 of 32 random bytes; the key is those bytes.
//! During a rotation a delivery carries one signature per live secret, separated by spaces,
//! so a receiver that still holds the old secret keeps verifying until it switches.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Prefix every secret carries, so a leaked one is recognisable.
pub const SECRET_PREFIX: &str = "whsec_";

/// A signing secret in its `whsec_...` form, with the key it decodes to.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    text: String,
    key: Vec<u8>,
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(****)")
    }
}

/// The text is not a `whsec_` secret.
#[derive(Debug, thiserror::Error)]
#[error("not a webhook secret (expected whsec_ followed by base64)")]
pub struct BadSecret;

impl WebhookSecret {
    /// 32 fresh random bytes.
    pub fn generate() -> Self {
        let key: [u8; 32] = rand::random();
        Self {
            text: format!("{SECRET_PREFIX}{}", STANDARD.encode(key)),
            key: key.to_vec(),
        }
    }

    /// Reads a stored `whsec_...` secret.
    pub fn parse(text: &str) -> Result<Self, BadSecret> {
        let encoded = text.strip_prefix(SECRET_PREFIX).ok_or(BadSecret)?;
        match STANDARD.decode(encoded) {
            Ok(key) if !key.is_empty() => Ok(Self {
                text: text.to_owned(),
                key,
            }),
            _ => Err(BadSecret),
        }
    }

    /// The `whsec_...` text (shown to the uploader once, stored in the database).
    pub fn expose(&self) -> &str {
        &self.text
    }

    /// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The `webhook-signature` header value: one signature per secret, space-separated.
pub fn signature_header(
    secrets: &[&WebhookSecret],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|secret| secret.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secrets_parse_and_differ() {
        let a = WebhookSecret::generate();
        let b = WebhookSecret::generate();
        assert!(a.expose().starts_with("whsec_"));
        assert_ne!(a, b);
        assert_eq!(WebhookSecret::parse(a.expose()).unwrap(), a);
        assert!(WebhookSecret::parse("secret").is_err());
        assert!(WebhookSecret::parse("whsec_!!!").is_err());
    }

    #[test]
    fn signature_matches_the_specification_example() {
        // The example published with the Standard Webhooks specification.
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn rotation_signs_with_every_live_secret() {
        let old = WebhookSecret::generate();
        let new = WebhookSecret::generate();
        let header = signature_header(&[&new, &old], "id", 1, b"{}");
        let parts: Vec<_> = header.split(' ').collect();
        assert_eq!(parts, [new.sign("id", 1, b"{}"), old.sign("id", 1, b"{}")]);
    }
}
