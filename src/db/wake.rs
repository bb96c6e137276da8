//! Who needs a NOTIFY: producers wake relays and feed readers only while one is waiting.
//!
//! NOTIFY is not free: PostgreSQL serializes the commits of notifying transactions (a global
//! lock held through the commit's WAL flush), so with a NOTIFY in every finalize, workers
//! cannot share WAL flushes and the queue's throughput drops by a sixth at 8 workers. A busy
//! relay does not need the wake-up, and neither does a database where nobody waits.
//!
//! The protocol, on one advisory lock ([`WAITING_LOCK`]):
//! - A waiter about to sleep takes its lock exclusively on a session of its own
//!   ([`WakeSession::announce`]), then looks for work once more, then sleeps; it releases the
//!   lock ([`WakeSession::withdraw`]) when it is busy again.
//! - A producer's outbox insert tries the lock SHARED for its transaction; failing means
//!   someone waits, and only then does it NOTIFY (`db::deliveries::outbox::insert`).
//! - A waiter that stops waiting while others slept "covered" by it NOTIFYs once, so they
//!   take over ([`WakeSession::hand_over`]).
//! - A producer that got the shared lock holds it until it commits, so a waiter cannot
//!   finish announcing while such a transaction is in flight ([`Announce::Busy`]); and a
//!   commit is visible before its locks are released, so once announced, every event that
//!   skipped its NOTIFY is visible to the re-check.

use std::time::Duration;

use diesel::QueryResult;
use diesel::sql_types::{BigInt, Bool};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// The channel relays and long-polling feed readers LISTEN on; an outbox insert NOTIFYs it
/// (`super::outbox`).
pub const EVENTS_CHANNEL: &str = "vidq_events";

/// The advisory lock a waiter holds while it sleeps ("vidq_evt"). Relays and API processes
/// with long-polling readers share it: whoever holds it, producers NOTIFY and every listener
/// hears it. One lock, because each extra lock a producer tries costs every enqueue
/// (measured: +0.2 ms median pickup with a second one).
pub const WAITING_LOCK: i64 = 0x7669_6471_5f65_7674;

/// The producer's test, in SQL: true when no waiter holds the lock (then no NOTIFY is sent).
/// Taking the shared lock is what makes a waiter's announce wait for this transaction.
pub fn nobody_waits_sql() -> String {
    format!("pg_try_advisory_xact_lock_shared({WAITING_LOCK})")
}

/// What an announce achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// This session took the lock: producers NOTIFY from now on. Re-check, then sleep.
    Announced,
    /// The lock is held (by this session already, or by another waiter): producers NOTIFY and
    /// every listener hears it. Sleep.
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

/// Tries to take the waiting lock on this session. `pg_locks` is only read when the try
/// failed, to tell another waiter (covered) from producers in flight (busy).
pub async fn announce(conn: &mut AsyncPgConnection) -> QueryResult<Announce> {
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
    .bind::<BigInt, _>(WAITING_LOCK)
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
    conn: Option<AsyncPgConnection>,
    held: bool,
    busy_nap: Duration,
}

/// The first wait after [`Announce::Busy`]; doubled while it stays busy (a producer
/// transaction left open, say), up to [`BUSY_NAP_MAX`].
const BUSY_NAP_FIRST: Duration = Duration::from_millis(2);
/// The longest wait between announce attempts: events that skipped their NOTIFY meanwhile
/// are found by the re-check that goes with each attempt.
const BUSY_NAP_MAX: Duration = Duration::from_millis(50);

impl WakeSession {
    /// A session on `url` (connected on first use). `None`: never announce, so the owner
    /// relies on its poll alone.
    pub fn new(url: Option<String>) -> Self {
        Self {
            url,
            conn: None,
            held: false,
            busy_nap: BUSY_NAP_FIRST,
        }
    }

    /// How long to wait before announcing again after [`Announce::Busy`]: 2 ms, doubling on
    /// each consecutive one up to 50 ms, back to 2 ms once announced or busy with work.
    pub fn busy_nap(&mut self) -> Duration {
        let nap = self.busy_nap;
        self.busy_nap = (nap * 2).min(BUSY_NAP_MAX);
        nap
    }

    /// Makes sure producers will NOTIFY (see [`Announce`]). When the lock is already held the
    /// session is checked to be alive; a lost session is replaced and the lock taken again.
    pub async fn announce(&mut self) -> Announce {
        if self.held {
            let alive = match self.conn.as_mut() {
                Some(conn) => step(super::session::ping(conn)).await.is_ok(),
                None => false,
            };
            if alive {
                return Announce::Covered;
            }
            tracing::warn!("wake-up session lost; opening another");
            self.drop_session();
        }
        let Some(url) = &self.url else {
            return Announce::Covered;
        };
        if self.conn.is_none() {
            match step(super::pool::dedicated(url)).await {
                Ok(conn) => self.conn = Some(conn),
                Err(error) => {
                    tracing::warn!(%error, "cannot open the wake-up session; relying on polling");
                    return Announce::Covered;
                }
            }
        }
        let conn = self.conn.as_mut().expect("connected above");
        match step(announce(conn)).await {
            Ok(Announce::Announced) => {
                self.held = true;
                self.busy_nap = BUSY_NAP_FIRST;
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
        self.busy_nap = BUSY_NAP_FIRST;
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
    /// takes over before its poll (used when the owner stops waiting for good or for long).
    pub async fn hand_over(&mut self) {
        let held = self.held;
        self.withdraw().await;
        if held && let Some(conn) = self.conn.as_mut() {
            let sql = format!("SELECT pg_notify('{EVENTS_CHANNEL}', '')");
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
