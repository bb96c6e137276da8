//! S3 calls whose body is fed as it arrives, for the `s3` tus store: a request's bytes go
//! through a small bounded channel into one `UploadPart` (or one `PutObject` of a tail
//! piece) of a length known in advance, so a request holds a few chunks, never a part. A
//! body that ends short of that length fails the call, and nothing of it is counted. Also
//! the multipart upload's own calls: create, complete, abort and list.
//!
//! The SDK sends such a body `aws-chunked` with a CRC32 trailer; to an `http:` endpoint it
//! also signs each chunk with SHA-256 (over TLS it does not need to), which is most of the
//! API's CPU on a plain-HTTP S3 at a few hundred MB/s.

use std::pin::Pin;
use std::task::{Context, Poll};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::{Storage, StorageError};

/// Chunks in flight between a request and its S3 call.
const CHANNEL_CHUNKS: usize = 8;

/// Where a request's bytes go while one streamed call runs: send chunks, then drop it.
pub type BodySender = mpsc::Sender<Bytes>;

/// The receiving side as an HTTP body the SDK sends.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(http_body::Frame::data(c))))
    }
}

/// A channel and the body it feeds.
fn channel() -> (BodySender, ByteStream) {
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    (tx, ByteStream::from_body_1_x(ChannelBody(rx)))
}

/// How completing a multipart upload went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completed {
    /// S3 assembled the object now.
    Now,
    /// S3 no longer knows the multipart upload: completed before (an answer lost), or
    /// aborted. The caller looks at the object to tell.
    UnknownUpload,
}

impl Storage {
    /// Starts a multipart upload on `key`; S3's id of it.
    pub async fn create_multipart(
        &self,
        key: &str,
        content_type: &str,
    ) -> Result<String, StorageError> {
        let out = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(self.at(key))
            .content_type(content_type)
            .send()
            .await
            .map_err(|e| StorageError::new("CreateMultipartUpload", key, e))?;
        out.upload_id().map(str::to_owned).ok_or_else(|| {
            StorageError::refused(
                "CreateMultipartUpload",
                key,
                "S3 answered without an upload id",
            )
        })
    }

    /// Starts part `number` of `size` bytes: returns the sender to feed, and the call to
    /// await for its ETag (after the last chunk is sent and the sender dropped).
    pub fn upload_part_streamed(
        &self,
        key: &str,
        multipart_id: &str,
        number: i32,
        size: u64,
    ) -> (
        BodySender,
        impl Future<Output = Result<String, StorageError>> + Send + 'static,
    ) {
        let (tx, body) = channel();
        let call = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(self.at(key))
            .upload_id(multipart_id)
            .part_number(number)
            .content_length(size as i64)
            .body(body)
            .customize()
            .config_override(self.transfer_override());
        let key = key.to_owned();
        let sent = async move {
            let out = call
                .send()
                .await
                .map_err(|e| StorageError::new("UploadPart", &key, e))?;
            out.e_tag().map(str::to_owned).ok_or_else(|| {
                StorageError::refused("UploadPart", &key, "S3 answered without an ETag")
            })
        };
        (tx, sent)
    }

    /// Starts a PUT of an object of `size` bytes fed through the returned sender.
    pub fn put_streamed(
        &self,
        key: &str,
        size: u64,
    ) -> (
        BodySender,
        impl Future<Output = Result<(), StorageError>> + Send + 'static,
    ) {
        let (tx, body) = channel();
        let call = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(self.at(key))
            .content_length(size as i64)
            .content_type("application/octet-stream")
            .body(body)
            .customize()
            .config_override(self.transfer_override());
        let key = key.to_owned();
        let sent = async move {
            call.send()
                .await
                .map(drop)
                .map_err(|e| StorageError::new("PutObject", &key, e))
        };
        (tx, sent)
    }

    /// Streams an object's bytes into `tx` (a part being fed); the byte count.
    pub async fn copy_into(&self, key: &str, tx: &BodySender) -> Result<u64, StorageError> {
        let Some(out) = self.get_object(key).await? else {
            return Err(StorageError::refused(
                "GetObject",
                key,
                "the object is gone",
            ));
        };
        let mut body = out.body;
        let mut copied = 0u64;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| StorageError::new("GetObject", key, e))?
        {
            copied += chunk.len() as u64;
            if tx.send(chunk).await.is_err() {
                break; // the part's call ended; its own error says why
            }
        }
        Ok(copied)
    }

    /// Assembles `key` from `parts` (part number and ETag, in file order).
    pub async fn complete_multipart(
        &self,
        key: &str,
        multipart_id: &str,
        parts: &[(i32, String)],
    ) -> Result<Completed, StorageError> {
        let parts = parts
            .iter()
            .map(|(number, etag)| {
                CompletedPart::builder()
                    .part_number(*number)
                    .e_tag(etag)
                    .build()
            })
            .collect();
        let answer = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(self.at(key))
            .upload_id(multipart_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            // S3 may take minutes to assemble a large object: a transfer's bounds.
            .customize()
            .config_override(self.transfer_override())
            .send()
            .await;
        match answer {
            Ok(_) => Ok(Completed::Now),
            Err(e) if no_such_upload(&e) => Ok(Completed::UnknownUpload),
            Err(e) => Err(StorageError::new("CompleteMultipartUpload", key, e)),
        }
    }

    /// Stores `data` (held in memory) as a multipart upload of `part`-byte parts, one part
    /// at a time, each sent as the `s3` tus store sends a part: a streamed body of a length
    /// given in advance, fed `frame` bytes at a time through the same channel, so the SDK
    /// makes the same checksum and signing choice for it (`aws-chunked` with a CRC32
    /// trailer, each chunk signed only over plain HTTP). What `vidq bench tus` measures the
    /// `s3` store against: the SDK's best on the path vidq takes, without a tus request
    /// before it.
    pub async fn put_multipart_streamed(
        &self,
        key: &str,
        data: Bytes,
        part: usize,
        frame: usize,
    ) -> Result<(), StorageError> {
        let multipart_id = self
            .create_multipart(key, "application/octet-stream")
            .await?;
        let mut parts = Vec::new();
        for (i, at) in (0..data.len()).step_by(part).enumerate() {
            let number = i as i32 + 1;
            let body = data.slice(at..(at + part).min(data.len()));
            let (tx, call) =
                self.upload_part_streamed(key, &multipart_id, number, body.len() as u64);
            let feed = async move {
                for at in (0..body.len()).step_by(frame) {
                    let piece = body.slice(at..(at + frame).min(body.len()));
                    if tx.send(piece).await.is_err() {
                        break; // the call ended; its own error says why
                    }
                }
            };
            let (etag, ()) = tokio::join!(call, feed);
            parts.push((number, etag?));
        }
        self.complete_multipart(key, &multipart_id, &parts)
            .await
            .map(drop)
    }

    /// Uploads part `number` from a body whose bytes the SDK holds (a file's part read into
    /// memory); its ETag.
    pub(super) async fn upload_part_bytes(
        &self,
        key: &str,
        multipart_id: &str,
        number: i32,
        body: ByteStream,
    ) -> Result<String, StorageError> {
        let out = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(self.at(key))
            .upload_id(multipart_id)
            .part_number(number)
            .body(body)
            .customize()
            .config_override(self.transfer_override())
            .send()
            .await
            .map_err(|e| StorageError::new("UploadPart", key, e))?;
        Ok(out.e_tag().unwrap_or_default().to_owned())
    }

    /// Aborts a multipart upload, dropping its parts (one S3 no longer knows is fine).
    pub async fn abort_multipart(&self, key: &str, multipart_id: &str) -> Result<(), StorageError> {
        match self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(self.at(key))
            .upload_id(multipart_id)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if no_such_upload(&e) => Ok(()),
            Err(e) => Err(StorageError::new("AbortMultipartUpload", key, e)),
        }
    }

    /// The multipart uploads in progress under `prefix`: key and S3's id of each.
    pub async fn list_multiparts(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, String)>, StorageError> {
        Ok(self
            .open_multiparts(prefix)
            .await?
            .into_iter()
            .map(|open| (open.key, open.id))
            .collect())
    }

    /// The multipart uploads in progress under `prefix`, with when each began.
    pub async fn open_multiparts(
        &self,
        prefix: &str,
    ) -> Result<Vec<super::OpenMultipart>, StorageError> {
        let mut found = Vec::new();
        let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
        loop {
            let out = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(self.at(prefix))
                .set_key_marker(key_marker.take())
                .set_upload_id_marker(id_marker.take())
                .send()
                .await
                .map_err(|e| StorageError::new("ListMultipartUploads", prefix, e))?;
            for upload in out.uploads() {
                let key = upload.key().and_then(|k| self.within(k));
                if let (Some(key), Some(id)) = (key, upload.upload_id()) {
                    found.push(super::OpenMultipart {
                        key: key.to_owned(),
                        id: id.to_owned(),
                        initiated: upload.initiated().and_then(|t| {
                            chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())
                        }),
                    });
                }
            }
            if out.is_truncated() != Some(true) {
                return Ok(found);
            }
            key_marker = out.next_key_marker().map(str::to_owned);
            id_marker = out.next_upload_id_marker().map(str::to_owned);
            if key_marker.is_none() && id_marker.is_none() {
                return Ok(found);
            }
        }
    }
}

/// S3 does not know the multipart upload (`NoSuchUpload`, a 404).
fn no_such_upload<E: aws_sdk_s3::error::ProvideErrorMetadata>(
    error: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> bool {
    match error {
        aws_sdk_s3::error::SdkError::ServiceError(e) => {
            e.err().code() == Some("NoSuchUpload") || e.raw().status().as_u16() == 404
        }
        _ => false,
    }
}
