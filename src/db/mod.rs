//! The only code that knows SQL. Query functions take `&mut AsyncPgConnection`, so the caller
//! decides which transaction they join (a confirm's video, job and outbox inserts share one).
//!
//! Lock order, everywhere: `users -> uploads -> videos -> video_encoding_jobs ->
//! notification_outbox -> webhook_endpoints -> event_deliveries`, rows of one table in id
//! order. User deletion takes the same order, so no two paths wait on each other.

pub mod artifacts;
pub mod attempts;
pub mod bench;
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
pub mod session;
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
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    /// A row holds a state this code does not know (a newer schema, or a hand edit).
    #[error("unexpected value in the database")]
    UnknownState(#[from] crate::domain::upload::UnknownState),
    /// Applying migrations failed.
    #[error("database migration failed")]
    Migration(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for DbError {
    fn from(err: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        Self::Pool(err)
    }
}
