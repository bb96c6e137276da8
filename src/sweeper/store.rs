//! The S3 calls the sweeper makes ([`SweepStore`]), implemented by the real client.

use std::future::Future;
use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::adapters::storage::{ListedObject, ObjectHead, OpenMultipart, Storage, StorageError};

/// The S3 calls the sweeper makes, so tests and `vidq bench sweeper` can wrap the real
/// client (count PUTs, fail some) without changing the code under test.
pub trait SweepStore: Clone + Send + Sync + 'static {
    /// The object's size, or `None`.
    fn head(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<ObjectHead>, StorageError>> + Send;
    /// PUTs a file (multipart when large), stored with its `sha256` when given (see
    /// [`ObjectHead::sha256`]); the byte count sent.
    fn put_file(
        &self,
        key: &str,
        path: &Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<u64, StorageError>> + Send;
    /// Deletes an object (absent is fine).
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StorageError>> + Send;
    /// Every object under `prefix`, with its size and age (the orphan pass).
    fn list(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<ListedObject>, StorageError>> + Send;
    /// The multipart uploads in progress under `prefix` (the orphan pass).
    fn open_multiparts(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<OpenMultipart>, StorageError>> + Send;
    /// Aborts a multipart upload (one S3 no longer knows is fine).
    fn abort_multipart(
        &self,
        key: &str,
        id: &str,
    ) -> impl Future<Output = Result<(), StorageError>> + Send;
}

impl SweepStore for Storage {
    async fn head(&self, key: &str) -> Result<Option<ObjectHead>, StorageError> {
        Storage::head(self, key).await
    }
    async fn put_file(
        &self,
        key: &str,
        path: &Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<u64, StorageError> {
        self.put_file_tagged(key, path, content_type, sha256, cancel)
            .await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        Storage::delete(self, key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ListedObject>, StorageError> {
        self.list_with_sizes(prefix).await
    }
    async fn open_multiparts(&self, prefix: &str) -> Result<Vec<OpenMultipart>, StorageError> {
        Storage::open_multiparts(self, prefix).await
    }
    async fn abort_multipart(&self, key: &str, id: &str) -> Result<(), StorageError> {
        Storage::abort_multipart(self, key, id).await
    }
}
