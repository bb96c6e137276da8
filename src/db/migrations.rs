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

/// Tries of a migration that PostgreSQL ended as a deadlock.
const DEADLOCK_TRIES: u32 = 5;

/// Applies every pending migration on a dedicated connection; returns how many ran.
///
/// A session advisory lock makes several `api` processes starting together apply them once.
/// Other roles may already be running their statements on the tables a migration alters (a
/// sweeper started beside a first API): when PostgreSQL breaks such a lock cycle by failing
/// the migration (`deadlock detected`), the migration, which runs in a transaction of its
/// own and so left nothing behind, is tried again.
pub async fn run_pending(url: &str) -> Result<usize, DbError> {
    let url = super::pool::with_default_user(url)?;
    // diesel's migration API is synchronous; the wrapper blocks on the async connection, so
    // it runs on the blocking pool rather than on a runtime worker.
    tokio::task::spawn_blocking(move || {
        let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::establish(&url)
            .map_err(|err| DbError::Connect(super::ConnectError::Establish(err)))?;
        conn.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"))?;
        // Counted before the first try: a try that deadlocked may have applied some already.
        let pending = conn
            .pending_migrations(MIGRATIONS)
            .map_err(DbError::Migration)?
            .len();
        let mut tries = 1;
        let done = loop {
            match conn.run_pending_migrations(MIGRATIONS) {
                Ok(_) => break Ok(pending),
                Err(error) if tries < DEADLOCK_TRIES && is_deadlock(error.as_ref()) => {
                    tracing::warn!(%error, tries, "a migration met a deadlock with another process's statements; applying it again");
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(200 * u64::from(tries)));
                }
                Err(error) => break Err(DbError::Migration(error)),
            }
        };
        conn.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"))?;
        done
    })
    .await
    .map_err(|err| DbError::Migration(Box::new(err)))?
}

/// Whether a migration failed because PostgreSQL broke a lock cycle it was part of. diesel
/// keeps the failed statement's error behind a type of its own that says only its text, so
/// the server's message is what is read (PostgreSQL's English one; a server answering in
/// another language makes such a migration fail as it would without this).
fn is_deadlock(error: &(dyn std::error::Error + Send + Sync + 'static)) -> bool {
    error.to_string().contains("deadlock detected")
}
