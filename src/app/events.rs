//! The pull feed: `GET /v1/events?after=CURSOR`, with an optional long-poll.
//!
//! Long-polling readers wait on [`EventSignal`], which the API's LISTEN connection ticks on
//! every NOTIFY from a producing transaction. Producers only NOTIFY while someone waits
//! (`db::wake`), so while this process has readers waiting, [`keep_readers_woken`] holds the
//! waiting lock. A tick is only a hint (a row may still be held back behind an older
//! running transaction), so waiters also re-read on a short interval.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{AppContext, AppError};
use crate::db::{self, events::FeedPosition, events::FeedRow};
use crate::domain::ids::UserId;

/// Longest long-poll a reader may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(30);
/// Largest page.
pub const MAX_LIMIT: i64 = 1000;
/// How often a waiting reader re-reads even without a tick.
const RECHECK: Duration = Duration::from_millis(250);

/// "An outbox row may have committed": a counter that only goes up, and how many readers
/// are waiting for it.
#[derive(Clone, Debug)]
pub struct EventSignal(Arc<SignalState>);

#[derive(Debug)]
struct SignalState {
    ticks: watch::Sender<u64>,
    /// Readers waiting now.
    waiting: watch::Sender<usize>,
}

impl Default for EventSignal {
    fn default() -> Self {
        Self(Arc::new(SignalState {
            ticks: watch::channel(0).0,
            waiting: watch::channel(0).0,
        }))
    }
}

/// A reader counted as waiting while this lives.
struct Waiting(EventSignal);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.0.waiting.send_modify(|n| *n -= 1);
    }
}

impl EventSignal {
    /// Wakes every waiting reader.
    pub fn tick(&self) {
        self.0.ticks.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.ticks.subscribe()
    }

    fn waiting(&self) -> Waiting {
        self.0.waiting.send_modify(|n| *n += 1);
        Waiting(self.clone())
    }
}

/// While any reader of this process waits, holds the waiting lock so producers NOTIFY
/// (and the LISTEN connection ticks `signal`); releases it when none waits. Runs until
/// `stop`.
pub async fn keep_readers_woken(
    signal: EventSignal,
    database_url: String,
    stop: CancellationToken,
) {
    use crate::db::wake::{Announce, WakeSession};
    // How often a waiter re-checks its hold (a held session is pinged, a covered one tries
    // to take the lock). A lapse costs readers nothing beyond their own RECHECK.
    const CHECK: Duration = Duration::from_secs(1);
    let mut waiters = signal.0.waiting.subscribe();
    let mut session = WakeSession::new(Some(database_url));
    'idle: loop {
        // Relays may have slept "covered" by this process: wake them to take over.
        session.hand_over().await;
        tokio::select! {
            () = stop.cancelled() => break,
            first = waiters.wait_for(|n| *n > 0) => if first.is_err() { break },
        }
        loop {
            let nap = match session.announce().await {
                Announce::Announced => {
                    // Producers NOTIFY from now on; readers re-read for what committed before.
                    signal.tick();
                    CHECK
                }
                Announce::Busy => session.busy_nap(),
                Announce::Covered => CHECK,
            };
            tokio::select! {
                () = stop.cancelled() => break 'idle,
                _ = waiters.wait_for(|n| *n == 0) => continue 'idle,
                () = tokio::time::sleep(nap) => {}
            }
        }
    }
    session.withdraw().await;
}

/// A page of the owner's feed (each event its envelope, as stored and as sent to sinks) and
/// the cursor to continue from (unchanged if empty).
pub async fn page(
    ctx: &AppContext,
    owner: UserId,
    after: FeedPosition,
    event_type: Option<&str>,
    limit: i64,
    wait: Duration,
) -> Result<(Vec<serde_json::Value>, FeedPosition), AppError> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(AppError::BadRequest(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    if wait > MAX_WAIT {
        return Err(AppError::BadRequest(
            "wait must be at most 30 seconds".into(),
        ));
    }
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribe before the first read, so a commit between the read and the wait still wakes.
    let mut signal = ctx.events.subscribe();
    let mut waiting = None;
    loop {
        // Seen before the read: a tick during the read then wakes the wait below at once.
        signal.borrow_and_update();
        let rows = {
            let mut conn = ctx.db.get().await?;
            db::events::page(&mut conn, owner, after, event_type, limit).await?
        };
        if !rows.is_empty() || tokio::time::Instant::now() >= deadline {
            let next = rows.last().map_or(after, FeedRow::position);
            return Ok((rows.into_iter().map(|row| row.body).collect(), next));
        }
        waiting.get_or_insert_with(|| ctx.events.waiting());
        tokio::select! {
            _ = signal.changed() => {}
            () = tokio::time::sleep(RECHECK) => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}
