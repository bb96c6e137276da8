//! What a storage call's failure says: which operation on which key, and whether S3 is
//! failing (an outage a circuit breaker counts) or refused this one request.

/// A storage failure: which operation on which key, with the SDK's error as the source.
#[derive(Debug, thiserror::Error)]
#[error("S3 {op} of {key:?} failed")]
pub struct StorageError {
    /// The S3 operation (`HeadObject`, `PutObject`...).
    pub op: &'static str,
    /// The key or prefix it was for.
    pub key: String,
    /// The SDK's error, with its own cause chain.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
    /// S3 or the way to it is failing (no answer in time, no connection, a 5xx or a 429),
    /// as opposed to S3 refusing this one request (a 4xx) or a local file failing: what a
    /// circuit breaker counts.
    pub outage: bool,
}

impl StorageError {
    /// S3 answered this request in a way vidq cannot use (`why`); not an outage.
    pub fn refused(op: &'static str, key: &str, why: &'static str) -> Self {
        Self::new(op, key, Refusal(why))
    }

    pub(super) fn new(
        op: &'static str,
        key: &str,
        source: impl std::error::Error + Outage + Send + Sync + 'static,
    ) -> Self {
        Self {
            op,
            key: key.to_owned(),
            outage: source.is_outage(),
            source: Box::new(source),
        }
    }
}

/// An answer vidq cannot use, in words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refusal(&'static str);

impl Outage for Refusal {
    fn is_outage(&self) -> bool {
        false
    }
}

/// Whether an error is S3 failing rather than S3 refusing one request.
pub trait Outage {
    /// See [`StorageError::outage`].
    fn is_outage(&self) -> bool;
}

impl<E> Outage for aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse> {
    fn is_outage(&self) -> bool {
        use aws_sdk_s3::error::SdkError;
        match self {
            SdkError::ServiceError(e) => {
                let status = e.raw().status().as_u16();
                status >= 500 || status == 429
            }
            SdkError::ConstructionFailure(_) => false,
            // Timeouts, connection failures, an answer that could not be read.
            _ => true,
        }
    }
}

/// A local file (reading a spool file, writing a download) or a caller's stop: not S3's.
impl Outage for std::io::Error {
    fn is_outage(&self) -> bool {
        false
    }
}

/// The body of an answer broke off mid-stream: the network or S3.
impl Outage for aws_sdk_s3::primitives::ByteStreamError {
    fn is_outage(&self) -> bool {
        true
    }
}

/// A request vidq could not even build.
impl Outage for aws_sdk_s3::error::BuildError {
    fn is_outage(&self) -> bool {
        false
    }
}

impl Outage for aws_sdk_s3::presigning::PresigningConfigError {
    fn is_outage(&self) -> bool {
        false
    }
}

/// The error of a transfer stopped by its caller.
pub(super) fn stopped(op: &'static str, key: &str) -> StorageError {
    StorageError::new(
        op,
        key,
        std::io::Error::new(std::io::ErrorKind::Interrupted, "stopped by the caller"),
    )
}
