//! One object at a time, from vidq's side: HEAD, GET to memory or to a file, PUT from memory
//! or from a file (a multipart upload above [`MULTIPART_THRESHOLD`], never left open).

use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::error::stopped;
use super::{
    Completed, MULTIPART_THRESHOLD, ObjectHead, PART_SIZE, SHA256_METADATA, Storage, StorageError,
    digest_metadata,
};

impl Storage {
    /// The object's size, or `None` if there is no such object.
    pub async fn head(&self, key: &str) -> Result<Option<ObjectHead>, StorageError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(self.at(key))
            .send()
            .await
        {
            Ok(out) => Ok(Some(ObjectHead {
                size: out.content_length().unwrap_or_default(),
                sha256: out.metadata().and_then(|m| m.get(SHA256_METADATA)).cloned(),
            })),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
            Err(err) => Err(StorageError::new("HeadObject", key, err)),
        }
    }

    /// Stores a small object from memory.
    pub async fn put_bytes(
        &self,
        key: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> Result<(), StorageError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.at(key))
            .content_type(content_type)
            .body(ByteStream::from(body))
            .customize()
            .config_override(self.transfer_override())
            .send()
            .await
            .map(drop)
            .map_err(|e| StorageError::new("PutObject", key, e))
    }

    /// Stores a small object only if no object has its key (`If-None-Match: *`): `false`
    /// when one was there already (S3 answered 412), and nothing was written.
    pub async fn put_bytes_if_absent(
        &self,
        key: &str,
        body: Vec<u8>,
        content_type: &str,
    ) -> Result<bool, StorageError> {
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(self.at(key))
            .content_type(content_type)
            .if_none_match("*")
            .body(ByteStream::from(body))
            .send()
            .await;
        match put {
            Ok(_) => Ok(true),
            Err(error)
                if error
                    .raw_response()
                    .is_some_and(|r| r.status().as_u16() == 412) =>
            {
                Ok(false)
            }
            Err(error) => Err(StorageError::new("PutObject", key, error)),
        }
    }

    /// Stores a file from disk, streaming it: a small file in one PUT, a large one as a
    /// multipart upload of [`PART_SIZE`] parts (aborted on failure, so no parts linger).
    /// Returns the byte count sent.
    pub async fn put_file(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
    ) -> Result<u64, StorageError> {
        self.put_file_until(key, path, content_type, &CancellationToken::new())
            .await
    }

    /// [`Storage::put_file`] that gives up when `cancel` fires (a lost claim, a shutdown, a
    /// deadline). A multipart upload it started is then aborted before it returns, so no
    /// parts linger in the bucket; if the future is dropped instead, the abort is sent from a
    /// task of its own.
    pub async fn put_file_until(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
        cancel: &CancellationToken,
    ) -> Result<u64, StorageError> {
        self.put_file_tagged(key, path, content_type, None, cancel)
            .await
    }

    /// [`Storage::put_file_until`] that stores `sha256` (the file's digest, hex) with the
    /// object as [`SHA256_METADATA`], for [`Storage::head`] to report.
    pub async fn put_file_tagged(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<u64, StorageError> {
        let size = tokio::fs::metadata(path)
            .await
            .map_err(|e| StorageError::new("PutObject", key, e))?
            .len();
        if size > MULTIPART_THRESHOLD {
            return self
                .put_multipart(key, path, content_type, sha256, cancel)
                .await
                .map(|()| size);
        }
        let body = ByteStream::from_path(path)
            .await
            .map_err(|e| StorageError::new("PutObject", key, e))?;
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(self.at(key))
            .content_type(content_type)
            .set_metadata(digest_metadata(sha256))
            .content_length(i64::try_from(size).unwrap_or(i64::MAX))
            .body(body)
            .customize()
            .config_override(self.transfer_override())
            .send();
        tokio::select! {
            sent = put => sent.map_err(|e| StorageError::new("PutObject", key, e))?,
            () = cancel.cancelled() => return Err(stopped("PutObject", key)),
        };
        Ok(size)
    }

    async fn put_multipart(
        &self,
        key: &str,
        path: &std::path::Path,
        content_type: &str,
        sha256: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<(), StorageError> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(self.at(key))
            .content_type(content_type)
            .set_metadata(digest_metadata(sha256))
            .send()
            .await
            .map_err(|e| StorageError::new("CreateMultipartUpload", key, e))?;
        let mut upload = OpenUpload {
            client: self.client.clone(),
            bucket: self.bucket.clone(),
            // The key in the bucket: the abort is sent without the prefix being added again.
            key: self.at(key),
            id: created.upload_id().unwrap_or_default().to_owned(),
            open: true,
        };
        let result = tokio::select! {
            done = self.upload_parts(key, &upload.id, path) => done,
            () = cancel.cancelled() => Err(stopped("UploadPart", key)),
        };
        match result {
            Ok(()) => upload.open = false,
            Err(_) => upload.abort().await,
        }
        result
    }

    async fn upload_parts(
        &self,
        key: &str,
        upload_id: &str,
        path: &std::path::Path,
    ) -> Result<(), StorageError> {
        let err = |op, e| StorageError::new(op, key, e);
        let mut file = tokio::fs::File::open(path)
            .await
            .map_err(|e| err("UploadPart", e))?;
        let mut parts = Vec::new();
        for number in 1.. {
            let mut chunk = Vec::with_capacity(PART_SIZE);
            (&mut file)
                .take(PART_SIZE as u64)
                .read_to_end(&mut chunk)
                .await
                .map_err(|e| err("UploadPart", e))?;
            if chunk.is_empty() {
                break;
            }
            let etag = self
                .upload_part_bytes(key, upload_id, number, ByteStream::from(chunk))
                .await?;
            parts.push((number, etag));
        }
        match self.complete_multipart(key, upload_id, &parts).await? {
            Completed::Now => Ok(()),
            // This call created the upload and nothing else completes it.
            Completed::UnknownUpload => Err(StorageError::refused(
                "CompleteMultipartUpload",
                key,
                "S3 no longer knows the multipart upload",
            )),
        }
    }

    /// Streams an object to a file, never holding more than a network buffer in memory.
    /// Returns the byte count; `None` if there is no such object.
    pub async fn download_to_file(
        &self,
        key: &str,
        path: &std::path::Path,
    ) -> Result<Option<u64>, StorageError> {
        let Some(out) = self.get_object(key).await? else {
            return Ok(None);
        };
        let mut file = tokio::fs::File::create(path)
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?;
        let mut body = out.body;
        let mut written = 0u64;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?
        {
            file.write_all(&chunk)
                .await
                .map_err(|e| StorageError::new("GetObject", key, e))?;
            written += chunk.len() as u64;
        }
        file.flush()
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?;
        Ok(Some(written))
    }

    /// Reads a small object into memory (`None` if absent).
    pub async fn get_bytes(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let Some(out) = self.get_object(key).await? else {
            return Ok(None);
        };
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?;
        Ok(Some(bytes.to_vec()))
    }

    /// Starts a GET; `None` if there is no such object. The call ends when the headers
    /// arrive, so the small-call limits bound only that wait; stalled-stream protection cuts
    /// a body that stops moving while it is read.
    pub(super) async fn get_object(
        &self,
        key: &str,
    ) -> Result<Option<aws_sdk_s3::operation::get_object::GetObjectOutput>, StorageError> {
        match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.at(key))
            .send()
            .await
        {
            Ok(out) => Ok(Some(out)),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_key()) => Ok(None),
            Err(err) => Err(StorageError::new("GetObject", key, err)),
        }
    }
}

/// A multipart upload that was created and neither completed nor aborted yet. Dropped while
/// open (its future was dropped mid-transfer), it sends the abort from a task of its own.
struct OpenUpload {
    client: Client,
    bucket: String,
    key: String,
    id: String,
    open: bool,
}

impl OpenUpload {
    /// Aborts it, so S3 drops its parts.
    async fn abort(&mut self) {
        self.open = false;
        abort_upload(&self.client, &self.bucket, &self.key, &self.id).await;
    }
}

impl Drop for OpenUpload {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %self.key, "a multipart upload was left open; its parts stay until the bucket's lifecycle rule removes them");
            return;
        };
        let (client, bucket, key, id) = (
            self.client.clone(),
            self.bucket.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.id),
        );
        runtime.spawn(async move { abort_upload(&client, &bucket, &key, &id).await });
    }
}

/// AbortMultipartUpload, best effort: a failure is logged (the parts then stay until a
/// bucket lifecycle rule for incomplete uploads removes them).
async fn abort_upload(client: &Client, bucket: &str, key: &str, id: &str) {
    let aborted = client
        .abort_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .send()
        .await;
    if let Err(error) = aborted {
        let error = StorageError::new("AbortMultipartUpload", key, error);
        tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not abort a multipart upload");
    }
}
