//! Per-user caps on unfinished work: uploads not yet turned into videos (or refused, or
//! expired) and live recordings not yet ended. One key must not be able to fill the
//! database and the spool with work it never finishes; past the cap a create answers 429,
//! naming the limit, and the caller finishes (or lets expire) what it has open first.
//!
//! The cap holds under any concurrency: every create counts and inserts in one transaction
//! under the user's lock ([`db::open_work::lock_and_has_room`]), and nothing outside the
//! database (an S3 multipart upload) is opened before the count has admitted it. On one
//! node, a user's creates also queue here for their turn before they take a database
//! connection, so a burst from one key waits in memory instead of holding the pool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use diesel_async::AsyncPgConnection;
use tokio::sync::OwnedMutexGuard;

use crate::db;
use crate::domain::ids::UserId;
pub use crate::domain::open_work::OpenWork;

use super::AppError;
use crate::sync::Locked;

/// Inside a create's transaction: takes the user's lock, counts, and refuses with
/// [`AppError::TooManyOpen`] when `cap` items of `kind` are open already.
pub async fn admit(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    kind: OpenWork,
    cap: u32,
) -> Result<(), AppError> {
    if db::open_work::lock_and_has_room(conn, owner, kind, cap).await? {
        Ok(())
    } else {
        Err(AppError::TooManyOpen { kind, cap })
    }
}

/// The user's turn to create work on this node: held across the create's transaction.
pub async fn turn(owner: UserId, kind: OpenWork) -> OwnedMutexGuard<()> {
    let lock = {
        let mut turns = TURNS.locked();
        if turns.len() > SWEEP_ABOVE {
            turns.retain(|_, lock| lock.strong_count() > 0);
        }
        let slot = turns.entry((owner, kind)).or_default();
        match slot.upgrade() {
            Some(lock) => lock,
            None => {
                let lock = Arc::new(tokio::sync::Mutex::new(()));
                *slot = Arc::downgrade(&lock);
                lock
            }
        }
    };
    lock.lock_owned().await
}

/// Entries kept before the table is swept of users with no create under way.
const SWEEP_ABOVE: usize = 1_000;

/// A user's turn lock, held while their create awaits or runs.
type Turn = Weak<tokio::sync::Mutex<()>>;

/// One process's turns, per user and kind (a lock lives while a create holds or awaits it).
static TURNS: std::sync::LazyLock<Mutex<HashMap<(UserId, OpenWork), Turn>>> =
    std::sync::LazyLock::new(Default::default);
