//! The idle line: of all worker processes with a free slot, only one, the head of the line,
//! listens for "a job became claimable". The others wait their turn in PostgreSQL's lock
//! queue, so an enqueue wakes one process instead of every idle one, and the head's claim
//! does not share the database's CPU with claims that can only find nothing (`vidq bench
//! queue`, 8 idle processes: 3 claim statements per job instead of 10).
//!
//! The protocol, on one session advisory lock ([`IDLE_LINE_LOCK`]) held by the connection
//! that LISTENs:
//! - a process joins the line when its runner reports idle (a free slot, and its last claim
//!   found nothing): `pg_advisory_lock` blocks until every process ahead of it has left;
//! - granted while still idle, it is the head: it LISTENs, then wakes its runner once, which
//!   claims whatever committed while it queued (a commit after the LISTEN arrives as a
//!   notification, one before it is visible to that claim), and again on every notification;
//! - once its runner is busy it UNLISTENs and unlocks, and the next process in line is
//!   granted. A process that became busy (through its poll) while it waited is granted, sees
//!   it is busy and passes at once;
//! - a head whose connection or process dies loses the lock with its session and the next
//!   in line takes over. Every worker's poll tick stays the safety net, also for a head that
//!   hangs with its connection open.

use std::pin::pin;
use std::time::Duration;

use diesel_async::{AsyncPgConnection, RunQueryDsl};
use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The advisory lock key of the idle line ("vidqidle"). Advisory locks are per database, so
/// deployments sharing a server do not share a line.
pub const IDLE_LINE_LOCK: i64 = 0x7669_6471_6964_6c65;

/// Who listens while idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listeners {
    /// Only the head of the idle line (what workers do).
    HeadOfLine,
    /// Every idle process, each racing the others to claim: how LISTEN-based queues usually
    /// wake. Kept so `vidq bench queue` can show the difference side by side.
    EveryIdle,
}

/// Why the line's connection had to be given up.
type LineError = Box<dyn std::error::Error + Send + Sync>;

/// Starts the line for one worker process. `idle` is the runner's "I have a free slot and
/// found nothing"; `wake` asks the runner to claim. Returns at once; the runner's first
/// claim does not depend on the line.
pub fn spawn(
    url: String,
    channel: &'static str,
    listeners: Listeners,
    mut idle: watch::Receiver<bool>,
    wake: impl Fn() + Send + Sync + 'static,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(100);
        while !stop.is_cancelled() {
            let line = Line {
                url: &url,
                channel,
                listeners,
            };
            match line.stand(&mut idle, &wake, &stop, &mut backoff).await {
                Ok(()) => return,
                Err(error) => {
                    let error = crate::telemetry::error_chain(error.as_ref());
                    tracing::warn!(%error, "idle line connection failed; relying on polling until it is back");
                }
            }
            // Notifications may have been missed while the connection was down.
            wake();
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    });
}

struct Line<'a> {
    url: &'a str,
    channel: &'static str,
    listeners: Listeners,
}

impl Line<'_> {
    /// One connection's life in the line; `Ok` when the worker stops.
    async fn stand(
        &self,
        idle: &mut watch::Receiver<bool>,
        wake: &impl Fn(),
        stop: &CancellationToken,
        backoff: &mut Duration,
    ) -> Result<(), LineError> {
        let channel = self.channel;
        let exclusive = self.listeners == Listeners::HeadOfLine;
        let mut conn = crate::db::pool::dedicated(self.url).await?;
        prepare_session(&mut conn).await?;
        *backoff = Duration::from_millis(100);
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                waited = idle.wait_for(|idle| *idle) => if waited.is_err() { return Ok(()) },
            }
            if exclusive {
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    locked = execute(&mut conn, format!("SELECT pg_advisory_lock({IDLE_LINE_LOCK})")) => locked?,
                }
            }
            if *idle.borrow() {
                execute(&mut conn, format!("LISTEN {channel}")).await?;
                tracing::debug!("head of the idle line");
                wake();
                {
                    // Until the runner is busy (the stream borrows the connection).
                    let mut notes = pin!(conn.notifications_stream());
                    loop {
                        tokio::select! {
                            () = stop.cancelled() => return Ok(()),
                            waited = idle.wait_for(|idle| !*idle) => {
                                if waited.is_err() { return Ok(()) }
                                break;
                            }
                            note = notes.next() => match note {
                                Some(Ok(_)) => wake(),
                                Some(Err(error)) => return Err(error.into()),
                                None => return Err("the LISTEN connection closed".into()),
                            },
                        }
                    }
                }
                execute(&mut conn, format!("UNLISTEN {channel}")).await?;
            }
            if exclusive {
                execute(
                    &mut conn,
                    format!("SELECT pg_advisory_unlock({IDLE_LINE_LOCK})"),
                )
                .await?;
            }
        }
    }
}

/// The line's waits are meant to be long: a server-wide `statement_timeout` must not cancel
/// them, and a server that supports it (PostgreSQL 14+) should notice a worker that vanished
/// while queued instead of granting it the lock first.
async fn prepare_session(conn: &mut AsyncPgConnection) -> Result<(), LineError> {
    execute(conn, "SET statement_timeout = 0".to_owned()).await?;
    if let Err(error) = execute(
        conn,
        "SET client_connection_check_interval = '2s'".to_owned(),
    )
    .await
    {
        tracing::debug!(%error, "server cannot check for vanished clients during a wait");
    }
    Ok(())
}

async fn execute(conn: &mut AsyncPgConnection, sql: String) -> diesel::QueryResult<()> {
    diesel::sql_query(sql).execute(conn).await.map(drop)
}
