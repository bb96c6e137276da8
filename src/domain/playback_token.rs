//! Playback tokens: what authorizes a player to read a video's HLS playlists through vidq.
//!
//! Players cannot send an `Authorization` header, so `hls_url` carries a token in its query
//! instead: `{expiry}.{mac}`, where `expiry` is a Unix time in seconds and `mac` is the
//! unpadded base64url HMAC-SHA256, under the server's playback key, of the video id and the
//! expiry. A token opens that one video's playlists (the master and its renditions) until it
//! expires and nothing else; it cannot be extended, since the expiry is inside the MAC.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::ids::{RecordingId, VideoId};

/// Separates this MAC from any other the same key might ever sign.
const CONTEXT: &[u8] = b"vidq-playback-v1\0";

/// Fewest bytes a configured key may have.
pub const MIN_KEY_BYTES: usize = 32;

/// The server's key that signs playback tokens. Every API node must hold the same key, or a
/// token issued by one node is refused by another. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct PlaybackKey(Vec<u8>);

impl std::fmt::Debug for PlaybackKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlaybackKey(****)")
    }
}

/// A configured key that is too short to resist guessing.
#[derive(Debug, thiserror::Error)]
#[error("the playback secret must have at least {MIN_KEY_BYTES} bytes")]
pub struct ShortKey;

impl PlaybackKey {
    /// 32 fresh random bytes, for a process whose tokens need not verify anywhere else.
    pub fn generate() -> Self {
        let key: [u8; 32] = rand::random();
        Self(key.to_vec())
    }

    /// A key from configured bytes (at least [`MIN_KEY_BYTES`]).
    pub fn new(bytes: &[u8]) -> Result<Self, ShortKey> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(ShortKey);
        }
        Ok(Self(bytes.to_vec()))
    }

    fn mac(&self, playable: impl Playable, expires: i64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key size");
        mac.update(CONTEXT);
        mac.update(playable.id().as_bytes());
        mac.update(&expires.to_be_bytes());
        mac
    }

    /// The token that opens the playlists of `playable` until `expires`.
    pub fn sign(&self, playable: impl Playable, expires: DateTime<Utc>) -> String {
        let expires = expires.timestamp();
        let tag = self.mac(playable, expires).finalize().into_bytes();
        format!("{expires}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Checks that `token` was signed with this key for `playable` and has not expired at `now`;
    /// returns its expiry. The MAC is compared in constant time, and checked before the
    /// expiry, so only a genuine token is ever told it has expired.
    pub fn verify(
        &self,
        playable: impl Playable,
        token: &str,
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, TokenError> {
        let (expires, tag) = token.split_once('.').ok_or(TokenError::Malformed)?;
        // Only the canonical decimal form: one token, one spelling.
        if expires.is_empty() || !expires.bytes().all(|b| b.is_ascii_digit()) {
            return Err(TokenError::Malformed);
        }
        let expires: i64 = expires.parse().map_err(|_| TokenError::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TokenError::Malformed)?;
        self.mac(playable, expires)
            .verify_slice(&tag)
            .map_err(|_| TokenError::Invalid)?;
        let expires = DateTime::from_timestamp(expires, 0).ok_or(TokenError::Malformed)?;
        if expires <= now {
            return Err(TokenError::Expired);
        }
        Ok(expires)
    }
}

/// What a token can open: a video's playlists, or a live recording's playlist. Ids are
/// UUIDv7 minted apart, so a token for one never opens the other.
pub trait Playable: Copy {
    /// The id the token is signed for.
    fn id(self) -> uuid::Uuid;
}

impl Playable for VideoId {
    fn id(self) -> uuid::Uuid {
        self.0
    }
}

impl Playable for RecordingId {
    fn id(self) -> uuid::Uuid {
        self.0
    }
}

/// Why a playback token was refused. The texts are safe to show the client: they name no key,
/// object or bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// No token, or not of the `{expiry}.{mac}` form.
    #[error("the playback URL has no valid token; use the hls_url of GET /v1/videos/{{id}}")]
    Malformed,
    /// Signed for another video, with another key, or altered.
    #[error(
        "the playback token is not valid for this video; use the hls_url of GET /v1/videos/{{id}}"
    )]
    Invalid,
    /// Genuine but past its expiry.
    #[error("the playback token has expired; GET /v1/videos/{{id}} again for a fresh hls_url")]
    Expired,
}

#[cfg(test)]
mod tests {
    use chrono::Duration;

    use super::*;

    fn key() -> PlaybackKey {
        PlaybackKey::new(&[7u8; 32]).unwrap()
    }

    #[test]
    fn a_token_opens_its_own_video_until_it_expires() {
        let (video, now) = (VideoId::new(), Utc::now());
        let token = key().sign(video, now + Duration::minutes(5));
        let expiry = key().verify(video, &token, now).unwrap();
        assert_eq!(expiry.timestamp(), (now + Duration::minutes(5)).timestamp());
        assert_eq!(
            key().verify(video, &token, now + Duration::minutes(6)),
            Err(TokenError::Expired)
        );
    }

    #[test]
    fn another_video_another_key_or_an_altered_token_is_refused() {
        let (video, now) = (VideoId::new(), Utc::now());
        let token = key().sign(video, now + Duration::minutes(5));
        assert_eq!(
            key().verify(VideoId::new(), &token, now),
            Err(TokenError::Invalid)
        );
        let other_key = PlaybackKey::new(&[8u8; 32]).unwrap();
        assert_eq!(
            other_key.verify(video, &token, now),
            Err(TokenError::Invalid)
        );
        // A later expiry with the old MAC: extending a token is tampering.
        let (expires, tag) = token.split_once('.').unwrap();
        let longer = format!("{}.{tag}", expires.parse::<i64>().unwrap() + 3600);
        assert_eq!(key().verify(video, &longer, now), Err(TokenError::Invalid));
        let mut flipped = token.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            key().verify(video, &String::from_utf8(flipped).unwrap(), now),
            Err(TokenError::Invalid)
        );
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let video = VideoId::new();
        for token in ["", "abc", "12.", ".abc", "+12.abc", "12.***", "1e3.abc"] {
            assert!(key().verify(video, token, Utc::now()).is_err(), "{token:?}");
        }
    }

    #[test]
    fn short_keys_are_refused_and_keys_never_print() {
        assert!(PlaybackKey::new(b"short").is_err());
        assert_eq!(format!("{:?}", key()), "PlaybackKey(****)");
    }
}
