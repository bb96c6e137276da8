//! Playback: the URLs a ready video is played from, and the HLS playlists vidq serves to
//! players when the bucket is private.
//!
//! A playlist names its segments relatively, so a presigned playlist URL is not enough: the
//! player would fetch the segments unsigned and get 403. With a private bucket `hls_url`
//! therefore points at vidq (`/v1/videos/{id}/hls.m3u8?token=...`, a token because players
//! cannot send headers), which reads the stored playlist and answers it with every init and
//! segment URI presigned and every variant URI pointing back at vidq with the same token.
//! With `VIDQ_PUBLIC_BASE_URL` the objects are public and every URL is a plain one.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use url::Url;

use super::videos::Playback;
use super::{AppContext, AppError};
use crate::config::PlaybackArgs;
use crate::db::{self, videos::VideoRow};
use crate::domain::hls::{self, Reference};
use crate::domain::ids::VideoId;
use crate::domain::playback_token::{PlaybackKey, ShortKey};

/// How long a player may keep a served playlist. Short: its presigned URLs age from the
/// moment it is served, and a player that reloads should get fresh ones.
pub const PLAYLIST_MAX_AGE: Duration = Duration::from_secs(60);

/// How playback URLs are made.
#[derive(Clone, Debug)]
pub struct PlaybackSettings {
    /// Signs and checks playback tokens.
    pub key: PlaybackKey,
    /// `VIDQ_PUBLIC_BASE_URL`: objects are public under it.
    pub public_base: Option<Url>,
}

impl PlaybackSettings {
    /// A private bucket and a key of this process's own (tests, `vidq dev`, admin commands).
    pub fn generated() -> Self {
        Self {
            key: PlaybackKey::generate(),
            public_base: None,
        }
    }

    /// From the settings; a process without `VIDQ_PLAYBACK_SECRET` generates its key, which
    /// only this process accepts.
    pub fn from_args(args: &PlaybackArgs) -> Result<Self, ShortKey> {
        let key = match &args.secret {
            Some(secret) => PlaybackKey::new(secret.expose().as_bytes())?,
            None => PlaybackKey::generate(),
        };
        Ok(Self {
            key,
            public_base: args.public_base_url.clone(),
        })
    }

    /// `{base}/{key}` for a public bucket.
    pub(crate) fn public_url(&self, key: &str) -> Option<String> {
        self.public_base
            .as_ref()
            .map(|base| format!("{}/{key}", base.as_str().trim_end_matches('/')))
    }
}

/// Where a player fetches the HLS playlist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HlsUrl {
    /// A URL to fetch as is (an object under `VIDQ_PUBLIC_BASE_URL`).
    Direct(String),
    /// A path and query on vidq's own API, with its token; the HTTP layer puts the address
    /// the client reached vidq at in front.
    Api(String),
}

impl HlsUrl {
    /// The absolute URL, given the API's `scheme://host` (and path prefix, if any).
    pub fn resolve(self, api_base: &str) -> String {
        match self {
            Self::Direct(url) => url,
            Self::Api(path) => format!("{}{path}", api_base.trim_end_matches('/')),
        }
    }
}

/// The playback URLs of a ready video.
pub async fn urls(ctx: &AppContext, video: &VideoRow) -> Result<Playback, AppError> {
    let ttl = Duration::from_secs(ctx.upload.playback_url_ttl_secs);
    let plain_or_signed = async |key: &Option<String>| -> Result<Option<String>, AppError> {
        let Some(key) = key else { return Ok(None) };
        match ctx.playback.public_url(&ctx.storage.at(key)) {
            Some(url) => Ok(Some(url)),
            None => Ok(Some(ctx.storage.presign_get(key, ttl).await?)),
        }
    };
    let hls_url = match (&video.hls_key, &ctx.playback.public_base) {
        (None, _) => None,
        (Some(key), Some(_)) => ctx
            .playback
            .public_url(&ctx.storage.at(key))
            .map(HlsUrl::Direct),
        (Some(_), None) => {
            let id = video.id;
            let expires = Utc::now() + ttl;
            let token = ctx.playback.key.sign(id, expires);
            Some(HlsUrl::Api(format!(
                "/v1/videos/{id}/hls.m3u8?token={token}"
            )))
        }
    };
    Ok(Playback {
        hls_url,
        mp4_url: plain_or_signed(&video.mp4_key).await?,
        thumbnail_url: plain_or_signed(&video.thumbnail_key).await?,
    })
}

/// A video's HLS playlist as a player may read it: the top one (`rendition` `None`: the
/// master of a ladder, or the only media playlist) or one rendition of a ladder. The token
/// is checked before anything is read; a video that is gone or not ready is `NotFound`.
pub async fn playlist(
    ctx: &AppContext,
    video: VideoId,
    rendition: Option<&str>,
    token: Option<&str>,
) -> Result<String, AppError> {
    let token = token.unwrap_or_default();
    ctx.playback.key.verify(video, token, Utc::now())?;
    if rendition.is_some_and(|r| !hls::is_rendition_name(r)) {
        return Err(AppError::NotFound);
    }
    let top_key = {
        let mut conn = ctx.db.get().await?;
        db::videos::ready_hls_key(&mut conn, video).await?
    }
    .ok_or(AppError::NotFound)?;
    // Objects sit next to their playlist; a rendition's playlist sits in its own directory.
    let top_dir = &top_key[..top_key.rfind('/').map_or(0, |i| i + 1)];
    let dir = match rendition {
        Some(r) => format!("{top_dir}{r}/"),
        None => top_dir.to_owned(),
    };
    let key = match rendition {
        Some(_) => format!("{dir}{}", hls::VARIANT_PLAYLIST),
        None => top_key.clone(),
    };
    let stored = ctx
        .storage
        .get_bytes(&key)
        .await?
        .ok_or(AppError::NotFound)?;
    let text =
        String::from_utf8(stored).map_err(|_| AppError::Playlist(hls::PlaylistError::NotText))?;

    let variants_allowed = rendition.is_none();
    let ttl = Duration::from_secs(ctx.upload.playback_url_ttl_secs);
    let mut signed: HashMap<&str, String> = HashMap::new();
    for reference in hls::references(&text, variants_allowed)? {
        if let Reference::Object(name) = reference
            && !signed.contains_key(name)
        {
            let url = ctx
                .storage
                .presign_get(&format!("{dir}{name}"), ttl)
                .await?;
            signed.insert(name, url);
        }
    }
    // Relative to `/v1/videos/{id}/hls.m3u8`, so it holds behind a proxy's path prefix too.
    let served = hls::rewrite(&text, variants_allowed, |reference| match reference {
        Reference::Object(name) => signed.get(name).cloned().unwrap_or_default(),
        Reference::Variant(r) => format!("hls/{r}.m3u8?token={token}"),
    })?;
    Ok(served)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    #[test]
    fn nodes_sharing_the_secret_accept_each_others_tokens_and_generated_keys_do_not() {
        let shared = PlaybackArgs {
            public_base_url: None,
            secret: Some(Secret::new("0123456789abcdef0123456789abcdef")),
        };
        let (a, b) = (
            PlaybackSettings::from_args(&shared).unwrap(),
            PlaybackSettings::from_args(&shared).unwrap(),
        );
        let video = VideoId::new();
        let token = a.key.sign(video, Utc::now() + chrono::Duration::minutes(1));
        assert!(b.key.verify(video, &token, Utc::now()).is_ok());
        let alone = PlaybackSettings::from_args(&PlaybackArgs::default()).unwrap();
        assert!(alone.key.verify(video, &token, Utc::now()).is_err());
        let short = PlaybackArgs {
            public_base_url: None,
            secret: Some(Secret::new("short")),
        };
        assert!(PlaybackSettings::from_args(&short).is_err());
    }

    #[test]
    fn api_urls_are_made_absolute_and_direct_ones_kept() {
        let api = HlsUrl::Api("/v1/videos/x/hls.m3u8?token=t".to_owned());
        assert_eq!(
            api.resolve("https://vidq.example/"),
            "https://vidq.example/v1/videos/x/hls.m3u8?token=t"
        );
        let direct = HlsUrl::Direct("https://cdn/x".to_owned());
        assert_eq!(direct.resolve("https://vidq.example"), "https://cdn/x");
    }
}
