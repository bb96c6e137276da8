//! Who needs a NOTIFY: producers wake relays only while one is asleep waiting for events.
//!
//! NOTIFY is not free: PostgreSQL serializes the commits of notifying transactions (a global
//! lock held through the commit's WAL flush), so with a NOTIFY in every finalize, workers
//! cannot share WAL flushes and the queue's throughput drops by a sixth at 8 workers. A relay
//! that is busy does not need the wake-up, and neither does a database with no relay.
//!
//! The protocol, on one advisory lock:
//! - A relay about to sleep takes [`WAITING_LOCK`] exclusively on its own session
//!   ([`announce`]), then looks for work once more, then sleeps; it releases the lock
//!   ([`withdraw`]) when it finds work.
//! - A producer's outbox insert tries the same lock SHARED for its transaction; failing
//!   means a relay is waiting, and only then does it NOTIFY (`db::outbox::insert`).
//! - A producer that got the shared lock holds it until it commits, so a relay cannot finish
//!   announcing while such a transaction is in flight ([`Announce::Busy`]): once announced,
//!   every event that skipped its NOTIFY is already committed and the re-check finds it.

use diesel::QueryResult;
use diesel::sql_types::{BigInt, Bool};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// The advisory lock a sleeping relay holds ("vidq_evt").
pub const WAITING_LOCK: i64 = 0x7669_6471_5f65_7674;

/// What [`announce`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// This session holds the lock: producers NOTIFY from now on. Re-check for work, then
    /// sleep.
    Announced,
    /// Another relay holds it: producers NOTIFY, and every listener hears it. Sleep.
    Covered,
    /// Producers are committing without NOTIFY right now: look again in a moment.
    Busy,
}

#[derive(diesel::QueryableByName)]
struct Attempt {
    #[diesel(sql_type = Bool)]
    got: bool,
    #[diesel(sql_type = Bool)]
    covered: bool,
}

/// Tries to take the waiting lock on this session (a dedicated connection, never a pooled
/// one: the lock lives as long as the session).
pub async fn announce(conn: &mut AsyncPgConnection) -> QueryResult<Announce> {
    let attempt: Attempt = super::prepared::prepared(
        "SELECT pg_try_advisory_lock($1) AS got,
                EXISTS (SELECT 1 FROM pg_locks
                         WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'
                           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                           AND classid = ($1 >> 32)::oid AND objid = ($1 & 4294967295)::oid
                           AND objsubid = 1) AS covered",
    )
    .bind::<BigInt, _>(WAITING_LOCK)
    .get_result(conn)
    .await?;
    Ok(match (attempt.got, attempt.covered) {
        (true, _) => Announce::Announced,
        (false, true) => Announce::Covered,
        (false, false) => Announce::Busy,
    })
}

/// Releases the waiting lock this session holds (a no-op if it holds none).
pub async fn withdraw(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    super::prepared::prepared(
        "SELECT pg_advisory_unlock($1) FROM pg_locks
          WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
            AND classid = ($1 >> 32)::oid AND objid = ($1 & 4294967295)::oid AND objsubid = 1",
    )
    .bind::<BigInt, _>(WAITING_LOCK)
    .execute(conn)
    .await
    .map(drop)
}
