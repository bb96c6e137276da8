//! Schema migrations, embedded in the binary so every node carries the schema it expects.

use diesel::Connection;
use diesel::connection::SimpleConnection;
use diesel_async::AsyncPgConnection;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use super::DbError;

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Key of the advisory lock that serializes migrations across processes.
const MIGRATION_LOCK: i64 = 7_271_013;

/// Applies every pending migration on a dedicated connection; returns how many ran.
///
/// A session advisory lock makes several `api` processes starting together apply them once.
pub async fn run_pending(url: &str) -> Result<usize, DbError> {
    let url = super::pool::with_default_user(url)?;
    // diesel's migration API is synchronous; the wrapper blocks on the async connection, so
    // it runs on the blocking pool rather than on a runtime worker.
    tokio::task::spawn_blocking(move || {
        let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::establish(&url)
            .map_err(|err| DbError::Connect(super::ConnectError::Establish(err)))?;
        conn.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))?;
        let applied = conn
            .run_pending_migrations(MIGRATIONS)
            .map(|versions| versions.len())
            .map_err(DbError::Migration);
        conn.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"))?;
        applied
    })
    .await
    .map_err(|err| DbError::Migration(Box::new(err)))?
}
