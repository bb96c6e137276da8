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

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::listener::{ListenError, Reconnect, pump};
use crate::db::session;

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
        let line = Line {
            url: &url,
            channel,
            listeners,
        };
        let mut retry = Reconnect::new("idle line connection");
        while !stop.is_cancelled() {
            let Err(error) = line.stand(&mut idle, &wake, &stop, &mut retry).await else {
                return;
            };
            // Notifications may be missed while the connection is down.
            wake();
            if !retry.after(&error, &stop).await {
                return;
            }
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
        retry: &mut Reconnect,
    ) -> Result<(), ListenError> {
        let channel = self.channel;
        let exclusive = self.listeners == Listeners::HeadOfLine;
        let mut conn = crate::db::pool::dedicated(&with_keepalives(self.url)?).await?;
        // The line's waits are long and silent on purpose; see `allow_long_waits`.
        session::allow_long_waits(&mut conn).await?;
        retry.connected();
        loop {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                waited = idle.wait_for(|idle| *idle) => if waited.is_err() { return Ok(()) },
            }
            if exclusive {
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    locked = session::advisory_lock(&mut conn, IDLE_LINE_LOCK) => locked?,
                }
            }
            if *idle.borrow() {
                session::listen(&mut conn, channel).await?;
                tracing::debug!("head of the idle line");
                wake();
                // Until the runner is busy; a runner that is gone ends the loop above.
                let busy = async {
                    let _ = idle.wait_for(|idle| !*idle).await;
                };
                if !pump(&mut conn, wake, stop, busy).await? {
                    return Ok(());
                }
                session::unlisten(&mut conn, channel).await?;
            }
            if exclusive {
                session::advisory_unlock(&mut conn, IDLE_LINE_LOCK).await?;
            }
        }
    }
}

/// The connection URL with client-side TCP keepalives after 30 s of silence (unless the URL
/// sets its own), so a head or a waiter on a server that vanished finds out in about a
/// minute rather than the system's two hours, and rejoins the line elsewhere.
fn with_keepalives(url: &str) -> Result<String, ListenError> {
    let mut parsed = url::Url::parse(url)?;
    let has = |key: &str| parsed.query_pairs().any(|(k, _)| k == key);
    let missing: Vec<(&str, &str)> = [
        ("keepalives_idle", "30"),
        ("keepalives_interval", "10"),
        ("keepalives_retries", "3"),
    ]
    .into_iter()
    .filter(|(key, _)| !has(key))
    .collect();
    parsed.query_pairs_mut().extend_pairs(missing);
    Ok(parsed.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keepalives_are_added_unless_the_url_sets_them() {
        let url = with_keepalives("postgres://u@db/vidq?keepalives_idle=5").unwrap();
        assert_eq!(
            url,
            "postgres://u@db/vidq?keepalives_idle=5&keepalives_interval=10&keepalives_retries=3"
        );
        let url = with_keepalives("postgres://u@db/vidq").unwrap();
        assert!(url.ends_with("?keepalives_idle=30&keepalives_interval=10&keepalives_retries=3"));
    }
}
