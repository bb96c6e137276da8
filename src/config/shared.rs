//! Settings every role shares: the database, S3, the log format, and the [`Secret`] wrapper
//! that keeps passwords out of logs.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use clap::Args;
use url::Url;

/// A value that must never be printed: `Debug` and `Display` show `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Where the database is and how many connections this process may hold.
#[derive(Debug, Clone, Args)]
pub struct DatabaseConfig {
    /// PostgreSQL URL, e.g. `postgres://vidq:secret@db.internal/vidq`. A URL without a user
    /// connects as the current OS user, as psql does.
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub url: Secret,

    /// Maximum connections in this process's pool.
    #[arg(
        long = "db-pool-size",
        env = "VIDQ_DB_POOL_SIZE",
        default_value_t = 10,
        value_parser = clap::value_parser!(u32).range(1..=200)
    )]
    pub pool_size: u32,
}

/// The database URL alone, for the roles whose pool size is fixed in code (worker, relay).
#[derive(Debug, Clone, Args)]
pub struct DatabaseUrl {
    /// PostgreSQL URL.
    #[arg(
        long = "database-url",
        env = "DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub url: Secret,
}

/// The S3 bucket that holds originals and encoded outputs.
///
/// Credentials come from the standard AWS chain: `AWS_ACCESS_KEY_ID` and
/// `AWS_SECRET_ACCESS_KEY`, a profile, or an instance role.
#[derive(Debug, Clone, Args)]
pub struct StorageConfig {
    /// S3 endpoint URL (MinIO, Ceph, R2...). Unset means AWS S3 itself.
    #[arg(long = "s3-endpoint", env = "VIDQ_S3_ENDPOINT", value_name = "URL")]
    pub endpoint: Option<Url>,

    /// Endpoint written into presigned URLs handed to clients, when clients reach S3 at
    /// another address than vidq does (e.g. `http://localhost:9000` outside Docker while
    /// vidq uses `http://minio:9000`). Defaults to the S3 endpoint.
    #[arg(
        long = "s3-public-endpoint",
        env = "VIDQ_S3_PUBLIC_ENDPOINT",
        value_name = "URL"
    )]
    pub public_endpoint: Option<Url>,

    /// Bucket name (3-63 characters: lowercase letters, digits, dots and hyphens).
    #[arg(long = "s3-bucket", env = "VIDQ_S3_BUCKET", value_name = "BUCKET", value_parser = parse_bucket)]
    pub bucket: String,

    /// Every key this deployment writes goes under this prefix (e.g. `prod/`; a `/` is
    /// added when missing), and its reads, presigned URLs, orphan pass and `vidq reconcile`
    /// see nothing outside it. Two deployments may share a bucket on different prefixes;
    /// on one prefix, the second refuses to start (the marker object `{prefix}.vidq-deployment`
    /// names the database that owns it). Default: none (the whole bucket is this
    /// deployment's).
    #[arg(long = "s3-prefix", env = "VIDQ_S3_PREFIX", value_name = "PREFIX",
          default_value = "", value_parser = parse_prefix)]
    pub prefix: String,

    /// S3 region.
    #[arg(
        long = "s3-region",
        env = "VIDQ_S3_REGION",
        value_name = "REGION",
        default_value = "us-east-1"
    )]
    pub region: String,

    /// Address buckets as `endpoint/bucket/key` instead of `bucket.endpoint/key`
    /// (MinIO and most S3-compatible servers need this).
    #[arg(
        long = "s3-force-path-style",
        env = "VIDQ_S3_FORCE_PATH_STYLE",
        value_name = "BOOL",
        default_value_t = false,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub force_path_style: bool,

    /// PEM file of CA certificates to trust for the S3 endpoint besides the system's (an
    /// S3-compatible server whose certificate a private CA signed). Read at start-up.
    #[arg(
        long = "s3-ca-file",
        env = "VIDQ_S3_CA_FILE",
        value_name = "PATH",
        value_parser = parse_ca_file
    )]
    pub ca: Option<CaCertificates>,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub timeouts: S3Timeouts,
}

/// How long vidq waits on S3. Without these, an S3 that accepts connections and never
/// answers held `/readyz`, confirm, deletes and `vidq api`'s start-up for minutes.
///
/// Small calls (HEAD, DELETE, a listing page, multipart bookkeeping) are bounded as a whole;
/// transfers (a PUT, one multipart part, a GET's body) are bounded per attempt and cut when
/// they stall, so a large file on a slow link is not cut by a limit meant for a HEAD.
#[derive(Debug, Clone, Copy, Args)]
pub struct S3Timeouts {
    /// Longest wait for a TCP (and TLS) connection to S3, in milliseconds.
    #[arg(long = "s3-connect-timeout-ms", env = "VIDQ_S3_CONNECT_TIMEOUT_MS", value_name = "MS",
          default_value_t = S3Timeouts::DEFAULT.connect_ms,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub connect_ms: u64,
    /// Longest wait for the first byte of S3's answer to a small call or a GET, per try,
    /// in seconds.
    #[arg(long = "s3-read-timeout-secs", env = "VIDQ_S3_READ_TIMEOUT_SECS", value_name = "SECS",
          default_value_t = S3Timeouts::DEFAULT.read_secs,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub read_secs: u64,
    /// Longest a small call may take with its retries, in seconds.
    #[arg(long = "s3-operation-timeout-secs", env = "VIDQ_S3_OPERATION_TIMEOUT_SECS", value_name = "SECS",
          default_value_t = S3Timeouts::DEFAULT.operation_secs,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub operation_secs: u64,
    /// Longest one transfer try (a PUT of up to 8 MiB or one 8 MiB part) may take, in
    /// seconds.
    #[arg(long = "s3-transfer-timeout-secs", env = "VIDQ_S3_TRANSFER_TIMEOUT_SECS", value_name = "SECS",
          default_value_t = S3Timeouts::DEFAULT.transfer_secs,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub transfer_secs: u64,
    /// A transfer that moves (on average) less than a byte a second for this long is cut,
    /// in seconds.
    #[arg(long = "s3-stall-secs", env = "VIDQ_S3_STALL_SECS", value_name = "SECS",
          default_value_t = S3Timeouts::DEFAULT.stall_secs,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub stall_secs: u64,
}

impl S3Timeouts {
    /// The defaults: connect 3 s, first byte 10 s, small call 30 s, transfer try 10 min,
    /// stall 20 s.
    pub const DEFAULT: Self = Self {
        connect_ms: 3_000,
        read_secs: 10,
        operation_secs: 30,
        transfer_secs: 600,
        stall_secs: 20,
    };
}

impl Default for S3Timeouts {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// How log lines are written (every role and command).
#[derive(Debug, Clone, Copy, Args)]
pub struct LogArgs {
    /// `text`: one human-readable line per event (ANSI colours on a terminal); `json`: one
    /// JSON object per line (`timestamp`, `level`, `target`, `fields`, `span`, `spans`) for
    /// a log shipper. The filter is `RUST_LOG` (default `info`).
    #[arg(long = "log-format", env = "VIDQ_LOG_FORMAT", value_name = "FORMAT", global = true,
          value_enum, default_value_t = LogFormat::Text)]
    pub format: LogFormat,
}

/// See [`LogArgs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

fn parse_prefix(raw: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Ok(String::new());
    }
    let safe = raw.len() <= 200
        && !raw.starts_with('/')
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
        && !raw.split('/').any(|part| part == "." || part == "..")
        && !raw.contains("//");
    if !safe {
        return Err(
            "a prefix is up to 200 letters, digits, `-`, `_`, `.` and `/`, \
             not starting with `/`, with no empty, `.` or `..` part"
                .to_owned(),
        );
    }
    Ok(if raw.ends_with('/') {
        raw.to_owned()
    } else {
        format!("{raw}/")
    })
}

fn parse_bucket(name: &str) -> Result<String, String> {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let valid_ends = name
        .bytes()
        .next()
        .zip(name.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    if (3..=63).contains(&name.len()) && valid_chars && valid_ends {
        Ok(name.to_owned())
    } else {
        Err(
            "a bucket name has 3-63 characters: lowercase letters, digits, dots and hyphens, \
             starting and ending with a letter or digit"
                .to_owned(),
        )
    }
}

/// CA certificates (PEM) trusted for S3, read from `VIDQ_S3_CA_FILE`.
#[derive(Clone, PartialEq, Eq)]
pub struct CaCertificates {
    /// The file's PEM text: one or more `CERTIFICATE` blocks.
    pub pem: String,
    /// How many certificates it holds.
    pub count: usize,
}

impl fmt::Debug for CaCertificates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CaCertificates({} certificate(s))", self.count)
    }
}

impl CaCertificates {
    /// Takes PEM text holding at least one certificate, each of which parses.
    pub fn from_pem(pem: &str) -> Result<Self, String> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject as _;
        let mut count = 0;
        // Each must also make a trust anchor: the SDK's client takes them without asking.
        let mut anchors = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let certificate = certificate.map_err(|e| format!("not a PEM certificate: {e}"))?;
            anchors
                .add(certificate)
                .map_err(|e| format!("holds a certificate that does not parse: {e}"))?;
            count += 1;
        }
        if count == 0 {
            return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned());
        }
        Ok(Self {
            pem: pem.to_owned(),
            count,
        })
    }
}

fn parse_ca_file(path: &str) -> Result<CaCertificates, String> {
    let pem = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    CaCertificates::from_pem(&pem).map_err(|e| format!("{path} {e}"))
}

/// Parses a `--health-listen` address, refusing anything but loopback.
pub fn loopback_addr(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("`{text}` is not an address with a port, e.g. 127.0.0.1:9091"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "the health listener binds to loopback only (127.0.0.1 or [::1]); `{text}` is not"
        ));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_is_taken_only_when_every_certificate_in_it_parses() {
        let one = rcgen::generate_simple_self_signed(["localhost".to_owned()])
            .unwrap()
            .cert
            .pem();
        let two = rcgen::generate_simple_self_signed(["127.0.0.1".to_owned()])
            .unwrap()
            .cert
            .pem();
        assert_eq!(CaCertificates::from_pem(&one).unwrap().count, 1);
        let bundle = format!("{one}{two}");
        assert_eq!(CaCertificates::from_pem(&bundle).unwrap().count, 2);
        // A PEM block of the right kind whose bytes are no certificate.
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let refused = CaCertificates::from_pem(garbage).unwrap_err();
        assert!(refused.contains("does not parse"), "{refused}");
        assert!(CaCertificates::from_pem(&format!("{one}{garbage}")).is_err());
        let refused = CaCertificates::from_pem("").unwrap_err();
        assert!(refused.contains("no PEM certificate"), "{refused}");
        assert_eq!(
            format!("{:?}", CaCertificates::from_pem(&bundle).unwrap()),
            "CaCertificates(2 certificate(s))"
        );
    }

    #[test]
    fn bucket_names_follow_s3_rules() {
        assert!(parse_bucket("vidq-media").is_ok());
        assert!(parse_bucket("ab").is_err());
        assert!(parse_bucket("Upper").is_err());
        assert!(parse_bucket("-dash").is_err());
        assert!(parse_bucket("under_score").is_err());
    }

    #[test]
    fn secrets_never_print() {
        let secret = Secret::new("postgres://u:pw@h/db");
        assert_eq!(format!("{secret:?}"), "[redacted]");
        assert_eq!(secret.expose(), "postgres://u:pw@h/db");
    }

    #[test]
    fn only_loopback_addresses_are_accepted() {
        assert!(loopback_addr("127.0.0.1:9091").is_ok());
        assert!(loopback_addr("[::1]:9091").is_ok());
        assert!(
            loopback_addr("0.0.0.0:9091")
                .unwrap_err()
                .contains("loopback only")
        );
        assert!(
            loopback_addr("10.0.0.5:9091")
                .unwrap_err()
                .contains("loopback only")
        );
        assert!(
            loopback_addr("localhost")
                .unwrap_err()
                .contains("with a port")
        );
    }
}
