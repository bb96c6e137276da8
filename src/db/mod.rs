//! The only code that knows SQL. Query functions take `&mut AsyncPgConnection`, so the caller
//! decides which transaction they join (a confirm's video, job and outbox inserts share one).
//!
//! Lock order, everywhere: `users -> uploads -> videos -> video_encoding_jobs ->
//! notification_outbox -> webhook_endpoints -> event_deliveries`, rows of one table in id
//! order. User deletion takes the same order, so no two paths wait on each other.

pub mod artifacts;
pub mod attempts;
pub mod deliveries;
pub mod events;
pub mod jobs;
pub mod migrations;
pub mod outbox;
pub mod pool;
pub mod prepared;
pub mod provision;
/// The tables as `diesel print-schema` generates them from `migrations/`.
#[allow(missing_docs)]
pub mod schema;
pub mod synthetic;
pub mod uploads;
pub mod users;
pub mod videos;
pub mod wake;
pub mod webhooks;

pub use pool::{DbConn, DbPool, connect};

/// A database failure, with its cause kept for the log.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection could be had from the pool in time (database down or pool exhausted).
    #[error("no database connection available")]
    Pool(#[source] bb8::RunError<diesel_async::pooled_connection::PoolError>),
    /// A statement failed.
    #[error("database query failed")]
    Query(#[from] diesel::result::Error),
    /// The URL is malformed or the server refused the connection at start-up.
    #[error("cannot connect to the database")]
    Connect(#[source] ConnectError),
    /// A row holds a state this code does not know (a newer schema, or a hand edit).
    #[error("unexpected value in the database")]
    UnknownState(#[from] crate::domain::upload::UnknownState),
    /// Applying migrations failed.
    #[error("database migration failed")]
    Migration(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Why no connection could be had, with the driver's or parser's error as the source.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// `DATABASE_URL` does not parse.
    #[error("DATABASE_URL is not a valid URL")]
    Url(#[source] url::ParseError),
    /// `DATABASE_URL` is some other kind of URL.
    #[error("DATABASE_URL must start with postgres:// or postgresql://")]
    Scheme,
    /// The URL cannot take the default user name.
    #[error("DATABASE_URL cannot carry a user name")]
    User,
    /// The URL names no database.
    #[error("DATABASE_URL names no database")]
    NoDatabase,
    /// The server refused or could not be reached.
    #[error("opening a connection failed")]
    Establish(#[source] diesel::ConnectionError),
    /// The pool could not open its first connection.
    #[error("opening a pooled connection failed")]
    Pool(#[source] bb8::RunError<diesel_async::pooled_connection::PoolError>),
}

impl From<ConnectError> for DbError {
    fn from(err: ConnectError) -> Self {
        Self::Connect(err)
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for DbError {
    fn from(err: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        Self::Pool(err)
    }
}
