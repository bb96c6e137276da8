//! Who needs a NOTIFY: producers wake relays and feed readers only while one is waiting.
//!
//! NOTIFY is not free: PostgreSQL serializes the commits of notifying transactions (a global
//! lock held through the commit's WAL flush), so with a NOTIFY in every finalize, workers
//! cannot share WAL flushes and the queue's throughput drops by a sixth at 8 workers. A busy
//! relay does not need the wake-up, and neither does a database where nobody waits.
//!
//! The protocol, on one advisory lock per kind of waiter ([`Waiter`]):
//! - A waiter about to sleep takes its lock exclusively on a session of its own
//!   ([`WakeSession::announce`]), then looks for work once more, then sleeps; it releases the
//!   lock ([`WakeSession::withdraw`]) when it is busy again.
//! - A producer's outbox insert tries every waiter lock SHARED for its transaction; failing
//!   on any means someone waits, and only then does it NOTIFY (`db::outbox::insert`).
//! - A producer that got the shared locks holds them until it commits, so a waiter cannot
//!   finish announcing while such a transaction is in flight ([`Announce::Busy`]); and a
//!   commit is visible before its locks are released, so once announced, every event that
//!   skipped its NOTIFY is visible to the re-check.

use std::time::Duration;

use diesel::QueryResult;
use diesel::sql_types::{BigInt, Bool};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

/// The kinds of waiter. Each has its own lock, so a feed reader holding its lock never
/// counts as "a relay is covered", and the other way round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiter {
    /// A relay with nothing to send.
    Relay,
    /// An API process with long-polling feed readers.
    Feed,
}

impl Waiter {
    /// Its advisory lock key.
    pub const fn lock(self) -> i64 {
        match self {
            Self::Relay => 0x7669_6471_5f65_7674, // "vidq_evt"
            Self::Feed => 0x7669_6471_5f66_6564,  // "vidq_fed"
        }
    }
}

/// The producer's test, in SQL: true when no waiter holds its lock (then no NOTIFY is sent).
/// Taking the shared locks is what makes a waiter's announce wait for this transaction.
pub fn nobody_waits_sql() -> String {
    format!(
        "(pg_try_advisory_xact_lock_shared({}) AND pg_try_advisory_xact_lock_shared({}))",
        Waiter::Relay.lock(),
        Waiter::Feed.lock()
    )
}

/// What an announce achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// This session took the lock: producers NOTIFY from now on. Re-check, then sleep.
    Announced,
    /// The lock is held (by this session already, or by another waiter of the same kind):
    /// producers NOTIFY and every listener hears it. Sleep.
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

/// Tries to take `waiter`'s lock on this session. `pg_locks` is only read when the try
/// failed, to tell another waiter (covered) from producers in flight (busy).
pub async fn announce(conn: &mut AsyncPgConnection, waiter: Waiter) -> QueryResult<Announce> {
    let attempt: Attempt = super::prepared::prepared(
        "SELECT got,
                CASE WHEN got THEN true ELSE EXISTS (
                    SELECT 1 FROM pg_locks
                     WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'
                       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                       AND classid = ($1 >> 32)::oid AND objid = ($1 & 4294967295)::oid
                       AND objsubid = 1) END AS covered
           FROM (SELECT pg_try_advisory_lock($1) AS got OFFSET 0) attempt",
    )
    .bind::<BigInt, _>(waiter.lock())
    .get_result(conn)
    .await?;
    Ok(match (attempt.got, attempt.covered) {
        (true, _) => Announce::Announced,
        (false, true) => Announce::Covered,
        (false, false) => Announce::Busy,
    })
}

/// Releases every advisory lock this session holds (a wake session holds nothing else).
pub async fn withdraw(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    super::prepared::prepared("SELECT pg_advisory_unlock_all()")
        .execute(conn)
        .await
        .map(drop)
}

/// Longest any wake-session step may take before the session is dropped (a half-open
/// connection must never stall its owner; closing the session releases the lock).
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// A waiter's dedicated session and whether it holds the lock. Failures never stop the
/// owner: the session is dropped (which releases the lock) and the owner's poll is the net.
pub struct WakeSession {
    url: Option<String>,
    waiter: Waiter,
    conn: Option<AsyncPgConnection>,
    held: bool,
}

impl WakeSession {
    /// A session for `waiter` on `url` (connected on first use). `None`: never announce, so
    /// the owner relies on its poll alone.
    pub fn new(url: Option<String>, waiter: Waiter) -> Self {
        Self {
            url,
            waiter,
            conn: None,
            held: false,
        }
    }

    /// Makes sure producers will NOTIFY (see [`Announce`]). When the lock is already held the
    /// session is checked to be alive; a lost session is replaced and the lock taken again.
    pub async fn announce(&mut self) -> Announce {
        if self.held {
            let alive = match self.conn.as_mut() {
                Some(conn) => step(diesel::sql_query("SELECT 1").execute(conn))
                    .await
                    .is_ok(),
                None => false,
            };
            if alive {
                return Announce::Covered;
            }
            tracing::warn!(waiter = ?self.waiter, "wake-up session lost; opening another");
            self.drop_session();
        }
        let Some(url) = &self.url else {
            return Announce::Covered;
        };
        if self.conn.is_none() {
            let connected = match super::pool::with_default_user(url) {
                Ok(url) => step(AsyncPgConnection::establish(&url)).await,
                Err(err) => Err(err.to_string()),
            };
            match connected {
                Ok(conn) => self.conn = Some(conn),
                Err(error) => {
                    tracing::warn!(%error, "cannot open the wake-up session; relying on polling");
                    return Announce::Covered;
                }
            }
        }
        let conn = self.conn.as_mut().expect("connected above");
        match step(announce(conn, self.waiter)).await {
            Ok(Announce::Announced) => {
                self.held = true;
                Announce::Announced
            }
            Ok(other) => other,
            Err(error) => {
                tracing::warn!(%error, "wake-up session failed; relying on polling");
                self.drop_session();
                Announce::Covered
            }
        }
    }

    /// Whether this session holds the lock (as far as it knows).
    pub fn holds(&self) -> bool {
        self.held
    }

    /// Stops producers from notifying on this waiter's behalf.
    pub async fn withdraw(&mut self) {
        if !self.held {
            return;
        }
        self.held = false;
        if let Some(conn) = self.conn.as_mut()
            && let Err(error) = step(withdraw(conn)).await
        {
            tracing::warn!(%error, "wake-up session failed; dropping it (that releases the lock)");
            self.drop_session();
        }
    }

    /// Withdraws and wakes every listener once, so a waiter that slept "covered" by this one
    /// takes over before its poll (used when the owner stops).
    pub async fn hand_over(&mut self) {
        let held = self.held;
        self.withdraw().await;
        if held && let Some(conn) = self.conn.as_mut() {
            let sql = format!("SELECT pg_notify('{}', '')", super::outbox::EVENTS_CHANNEL);
            let _ = step(diesel::sql_query(sql).execute(conn)).await;
        }
    }

    fn drop_session(&mut self) {
        self.conn = None;
        self.held = false;
    }
}

async fn step<T, E: std::fmt::Display>(
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(STEP_TIMEOUT, work).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {} s", STEP_TIMEOUT.as_secs())),
    }
}
