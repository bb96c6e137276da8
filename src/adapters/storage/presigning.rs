//! Presigned URLs: what clients PUT uploads to and GET outputs from, signed for the public
//! endpoint. GETs are signed by [`FastGet`] when its URL shape could be learned at start-up
//! (they are on every status read), otherwise by the SDK.

use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;

use super::{PresignedPut, Storage, StorageError};
use crate::adapters::presign::{self, FastGet};

impl Storage {
    /// Presigns [`presign::PROBE_KEY`] through the SDK to learn how its URLs look,
    /// for [`FastGet`]. `None` (every GET then presigned by the SDK) when
    /// there are no credentials yet or the URL has an unexpected shape.
    pub(super) async fn learn_fast_get(
        &self,
        shared: &aws_config::SdkConfig,
        region: &str,
    ) -> Option<std::sync::Arc<FastGet>> {
        let provider = shared.credentials_provider()?;
        let probe = self
            .sdk_presign_get(presign::PROBE_KEY, Duration::from_secs(60), None)
            .await;
        let shape = match probe {
            Ok(url) => presign::ObjectUrlShape::from_presigned(&url),
            Err(error) => {
                tracing::debug!(error = %crate::telemetry::error_chain(&error),
                    "no presign probe; GET URLs are presigned by the SDK");
                None
            }
        }?;
        Some(std::sync::Arc::new(FastGet::new(shape, region, provider)))
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
            .key(self.at(key))
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
            match fast.presign(&self.at(key), ttl).await {
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
            .key(self.at(key))
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
        fast.presign_at(&self.at(key), ttl, now).await.ok()
    }
}
