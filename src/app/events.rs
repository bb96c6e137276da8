//! The pull feed: `GET /v1/events?after=CURSOR`, with an optional long-poll.
//!
//! Long-polling readers wait on [`EventSignal`], which the API's LISTEN connection ticks on
//! every NOTIFY from a producing transaction. A tick is only a hint (a row may still be held
//! back behind an older running transaction), so waiters also re-read on a short interval.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{AppContext, AppError};
use crate::db::{self, events::FeedPosition, events::FeedRow};
use crate::domain::ids::UserId;

/// Longest long-poll a reader may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(30);
/// Largest page.
pub const MAX_LIMIT: i64 = 1000;
/// How often a waiting reader re-reads even without a tick.
const RECHECK: Duration = Duration::from_millis(250);

/// "An outbox row may have committed": a counter that only goes up.
#[derive(Clone, Debug)]
pub struct EventSignal(Arc<watch::Sender<u64>>);

impl Default for EventSignal {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl EventSignal {
    /// Wakes every waiting reader.
    pub fn tick(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// A page of the owner's feed and the cursor to continue from (unchanged if empty).
pub async fn page(
    ctx: &AppContext,
    owner: UserId,
    after: FeedPosition,
    event_type: Option<&str>,
    limit: i64,
    wait: Duration,
) -> Result<(Vec<FeedRow>, FeedPosition), AppError> {
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
    loop {
        // Seen before the read: a tick during the read then wakes the wait below at once.
        signal.borrow_and_update();
        let rows = {
            let mut conn = ctx.db.get().await?;
            db::events::page(&mut conn, owner.0, after, event_type, limit).await?
        };
        if !rows.is_empty() || tokio::time::Instant::now() >= deadline {
            let next = rows.last().map_or(after, FeedRow::position);
            return Ok((rows, next));
        }
        tokio::select! {
            _ = signal.changed() => {}
            () = tokio::time::sleep(RECHECK) => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}
