//! An S3-compatible server inside the process (s3s over a local directory), for `vidq dev`
//! on a laptop and for the tests. It speaks the real protocol, SigV4 and presigned URLs
//! included, so the same aws-sdk-s3 code paths run against it as against AWS; over plain
//! HTTP, or over HTTPS with a self-signed certificate (the tests and benchmarks of TLS).
//! It answers CORS as a bucket with the rule docs/operations.md gives (any origin, GET and
//! HEAD), so a page plays from it as from a real bucket.

use std::net::SocketAddr;
use std::path::Path;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use s3s::auth::SimpleAuth;
use s3s::dto;
use s3s::service::S3ServiceBuilder;
use s3s::{S3, S3Request, S3Response, S3Result};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::config::CaCertificates;

/// s3s-fs, which keeps the state of multipart uploads in progress but cannot list them, and
/// the listing (`ListMultipartUploads`): vidq's `s3` tus store and its tests ask S3 which
/// multipart uploads are still open.
struct WithUploadListing {
    fs: s3s_fs::FileSystem,
    root: std::path::PathBuf,
}

/// Passes each S3 call that s3s-fs serves on to it (spelled as `async_trait` spells an
/// `async fn`, which it cannot do for fns a macro makes inside the impl).
macro_rules! served_by_fs {
    ($($call:ident: $input:ident => $output:ident;)+) => {
        $(
            fn $call<'life0, 'async_trait>(
                &'life0 self,
                req: S3Request<dto::$input>,
            ) -> std::pin::Pin<Box<
                dyn std::future::Future<Output = S3Result<S3Response<dto::$output>>>
                    + Send
                    + 'async_trait,
            >>
            where
                'life0: 'async_trait,
                Self: 'async_trait,
            {
                Box::pin(async move { self.fs.$call(req).await })
            }
        )+
    };
}

#[async_trait::async_trait]
impl S3 for WithUploadListing {
    served_by_fs! {
        create_bucket: CreateBucketInput => CreateBucketOutput;
        copy_object: CopyObjectInput => CopyObjectOutput;
        delete_bucket: DeleteBucketInput => DeleteBucketOutput;
        delete_object: DeleteObjectInput => DeleteObjectOutput;
        delete_objects: DeleteObjectsInput => DeleteObjectsOutput;
        get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput;
        get_object: GetObjectInput => GetObjectOutput;
        head_bucket: HeadBucketInput => HeadBucketOutput;
        head_object: HeadObjectInput => HeadObjectOutput;
        list_buckets: ListBucketsInput => ListBucketsOutput;
        list_objects: ListObjectsInput => ListObjectsOutput;
        list_objects_v2: ListObjectsV2Input => ListObjectsV2Output;
        put_object: PutObjectInput => PutObjectOutput;
        create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput;
        upload_part: UploadPartInput => UploadPartOutput;
        upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput;
        list_parts: ListPartsInput => ListPartsOutput;
        abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput;
    }

    /// S3 assembles the parts listed, in ascending order, numbers with gaps included; s3s-fs
    /// takes only 1, 2, 3... So the listed parts' files are renumbered that way first (s3s-fs
    /// keeps part `n` as `.upload_id-{id}.part-{n}`, and drops the unlisted ones after).
    async fn complete_multipart_upload(
        &self,
        mut req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        let id = req.input.upload_id.clone();
        if uuid::Uuid::parse_str(&id).is_err() {
            return Err(s3s::s3_error!(NoSuchUpload));
        }
        if let Some(parts) = req
            .input
            .multipart_upload
            .as_mut()
            .and_then(|m| m.parts.as_mut())
        {
            let file = |kind: &str, n: i32| self.root.join(format!(".upload_id-{id}.{kind}-{n}"));
            for (i, part) in parts.iter().enumerate() {
                let number = part.part_number.unwrap_or_default();
                std::fs::rename(file("part", number), file("renumbered", i as i32 + 1))
                    .map_err(|_| s3s::s3_error!(InvalidPart))?;
            }
            for (i, part) in parts.iter_mut().enumerate() {
                let number = i as i32 + 1;
                std::fs::rename(file("renumbered", number), file("part", number))
                    .map_err(|e| s3s::s3_error!(e, InternalError))?;
                part.part_number = Some(number);
            }
        }
        self.fs.complete_multipart_upload(req).await
    }

    /// s3s-fs keeps `.bucket-{bucket}.object-{key}.upload-{id}.metadata.json` (names in
    /// URL-safe base64) from the creation of a multipart upload to its completion or abort:
    /// those are the uploads in progress, begun when that file was written. One page, keys
    /// under the prefix.
    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let input = req.input;
        let marker = format!(".bucket-{}.object-", b64.encode(&input.bucket));
        let prefix = input.prefix.clone().unwrap_or_default();
        let entries =
            std::fs::read_dir(&self.root).map_err(|e| s3s::s3_error!(e, InternalError))?;
        let mut uploads = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name
                .strip_prefix(&marker)
                .and_then(|r| r.strip_suffix(".metadata.json"))
            else {
                continue;
            };
            let Some((key, id)) = rest.split_once(".upload-") else {
                continue;
            };
            let Some(key) = b64.decode(key).ok().and_then(|k| String::from_utf8(k).ok()) else {
                continue;
            };
            if key.starts_with(&prefix) {
                // Written once, when the upload is created: its time is the upload's start.
                let initiated = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .map(dto::Timestamp::from);
                uploads.push(dto::MultipartUpload {
                    key: Some(key),
                    upload_id: Some(id.to_owned()),
                    initiated,
                    ..Default::default()
                });
            }
        }
        uploads.sort_by(|a, b| (&a.key, &a.upload_id).cmp(&(&b.key, &b.upload_id)));
        Ok(S3Response::new(dto::ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            is_truncated: Some(false),
            uploads: Some(uploads),
            ..Default::default()
        }))
    }
}

/// A running embedded S3 server; stops when dropped or when [`EmbeddedS3::stop`] is called.
pub struct EmbeddedS3 {
    addr: SocketAddr,
    /// The certificate it presents, when it speaks HTTPS.
    certificate: Option<CaCertificates>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

/// Why the embedded server could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the embedded S3 server on {root}")]
pub struct EmbeddedS3Error {
    root: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl EmbeddedS3 {
    /// Serves the objects under `root` (one directory per bucket) on `listener` over plain
    /// HTTP, accepting requests signed with this key pair only.
    pub fn start(
        root: &Path,
        listener: TcpListener,
        access_key: &str,
        secret_key: &str,
    ) -> Result<Self, EmbeddedS3Error> {
        Self::serve(root, listener, access_key, secret_key, None)
    }

    /// The same over HTTPS, with a self-signed certificate for `127.0.0.1` and `localhost`
    /// made now: a client trusts it by [`EmbeddedS3::certificate`] (`VIDQ_S3_CA_FILE`).
    /// S3 in production is reached over TLS, and the SDK sends bodies differently there.
    pub fn start_tls(
        root: &Path,
        listener: TcpListener,
        access_key: &str,
        secret_key: &str,
    ) -> Result<Self, EmbeddedS3Error> {
        let tls = self_signed().map_err(|source| EmbeddedS3Error {
            root: root.display().to_string(),
            source,
        })?;
        Self::serve(root, listener, access_key, secret_key, Some(tls))
    }

    fn serve(
        root: &Path,
        listener: TcpListener,
        access_key: &str,
        secret_key: &str,
        tls: Option<(CaCertificates, TlsAcceptor)>,
    ) -> Result<Self, EmbeddedS3Error> {
        let err = |source: Box<dyn std::error::Error + Send + Sync>| EmbeddedS3Error {
            root: root.display().to_string(),
            source,
        };
        std::fs::create_dir_all(root).map_err(|e| err(Box::new(e)))?;
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| err(format!("{e:?}").into()))?;
        let root = std::fs::canonicalize(root).map_err(|e| err(Box::new(e)))?;
        let mut builder = S3ServiceBuilder::new(WithUploadListing { fs, root });
        builder.set_auth(SimpleAuth::from_single(access_key, secret_key));
        let service = with_cors(builder.build());
        let addr = listener.local_addr().map_err(|e| err(Box::new(e)))?;
        let (certificate, acceptor) = match tls {
            Some((certificate, acceptor)) => (Some(certificate), Some(acceptor)),
            None => (None, None),
        };
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let http = ConnBuilder::new(TokioExecutor::new());
            loop {
                let socket = tokio::select! {
                    () = stopped.cancelled() => break,
                    accepted = listener.accept() => match accepted {
                        Ok((socket, _)) => socket,
                        Err(error) => {
                            tracing::warn!(%error, "embedded S3 could not accept a connection");
                            continue;
                        }
                    },
                };
                let (http, service, stopped) = (http.clone(), service.clone(), stopped.clone());
                let acceptor = acceptor.clone();
                // Each connection on its own task, the TLS handshake included, so a slow
                // handshake does not hold the accept loop.
                tokio::spawn(async move {
                    let served = async {
                        match acceptor {
                            None => {
                                let _ = http.serve_connection(TokioIo::new(socket), service).await;
                            }
                            Some(acceptor) => match acceptor.accept(socket).await {
                                Ok(stream) => {
                                    let _ =
                                        http.serve_connection(TokioIo::new(stream), service).await;
                                }
                                Err(error) => {
                                    tracing::debug!(%error, "embedded S3: a TLS handshake failed");
                                }
                            },
                        }
                    };
                    tokio::select! {
                        () = served => {}
                        () = stopped.cancelled() => {}
                    }
                });
            }
        });
        Ok(Self {
            addr,
            certificate,
            stop,
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ip:port` (or `https://`), for `VIDQ_S3_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        let scheme = match self.certificate {
            Some(_) => "https",
            None => "http",
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The certificate it presents over HTTPS, for a client to trust (its `pem` is what a
    /// `VIDQ_S3_CA_FILE` holds); `None` over HTTP.
    pub fn certificate(&self) -> Option<&CaCertificates> {
        self.certificate.as_ref()
    }

    /// Stops accepting and closes open connections.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// What a bucket's CORS rule (`AllowedOrigins: *`, `AllowedMethods: GET, HEAD`,
/// `AllowedHeaders: Range`) makes S3 answer: preflights of a GET or HEAD answered before
/// any signature is checked (a browser sends none), and reads marked readable by any page.
/// Other methods stay same-origin, as with that rule.
fn with_cors(
    s3: s3s::service::S3Service,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<s3s::Body>,
    Error = s3s::HttpError,
    Future: Send + 'static,
> + Clone
+ Send
+ 'static {
    use http::header;
    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let s3 = s3.clone();
        async move {
            let from_a_page = req.headers().contains_key(header::ORIGIN);
            let asked = req
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_METHOD)
                .and_then(|m| m.to_str().ok())
                .map(str::to_owned);
            if req.method() == http::Method::OPTIONS && from_a_page {
                let allowed = matches!(asked.as_deref(), Some("GET" | "HEAD"));
                let mut answer = http::Response::new(s3s::Body::empty());
                *answer.status_mut() = if allowed {
                    http::StatusCode::OK
                } else {
                    http::StatusCode::FORBIDDEN
                };
                if allowed {
                    mark(
                        answer.headers_mut(),
                        &[
                            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
                            (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, HEAD"),
                            (header::ACCESS_CONTROL_ALLOW_HEADERS, "range"),
                            (header::ACCESS_CONTROL_MAX_AGE, "3600"),
                        ],
                    );
                }
                return Ok(answer);
            }
            let readable = matches!(*req.method(), http::Method::GET | http::Method::HEAD);
            let mut answer = hyper::service::Service::call(&s3, req).await?;
            if from_a_page && readable {
                mark(
                    answer.headers_mut(),
                    &[
                        (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
                        (
                            header::ACCESS_CONTROL_EXPOSE_HEADERS,
                            "Content-Length, Content-Range, ETag",
                        ),
                    ],
                );
            }
            Ok(answer)
        }
    })
}

fn mark(headers: &mut http::HeaderMap, pairs: &[(http::header::HeaderName, &'static str)]) {
    for (name, value) in pairs {
        headers.insert(name.clone(), http::HeaderValue::from_static(value));
    }
}

/// A self-signed certificate for the loopback names, and the acceptor that presents it.
fn self_signed() -> Result<(CaCertificates, TlsAcceptor), Box<dyn std::error::Error + Send + Sync>>
{
    let made =
        rcgen::generate_simple_self_signed(["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
    // Named, not taken from the process default: more than one provider is linked in.
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![made.cert.der().clone()], key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((
        CaCertificates::from_pem(&made.cert.pem())?,
        TlsAcceptor::from(std::sync::Arc::new(config)),
    ))
}

impl Drop for EmbeddedS3 {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
