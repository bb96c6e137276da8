//! Many objects, and the bucket itself: listing and deleting by prefix or by key (deletions,
//! `vidq reconcile`), and checking or creating the bucket at start-up.

use aws_sdk_s3::types::{Delete, ObjectIdentifier};

use super::{ListedObject, Storage, StorageError};

impl Storage {
    /// Deletes one object (deleting an absent object succeeds, as in S3).
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(self.at(key))
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
            .prefix(self.at(prefix))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| StorageError::new("ListObjectsV2", prefix, e))?;
            for object in page.contents() {
                let Some(key) = object.key().and_then(|k| self.within(k)) else {
                    continue;
                };
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
                .map(|key| ObjectIdentifier::builder().key(self.at(key)).build())
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
                let key = failed
                    .key()
                    .and_then(|k| self.within(k))
                    .unwrap_or(prefix)
                    .to_owned();
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
