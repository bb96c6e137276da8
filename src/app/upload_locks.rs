//! One request at a time per upload through vidq on this node, and a way for the next
//! request to take an upload over from one whose client is gone.
//!
//! A mobile client whose connection dropped mid-PATCH reconnects at once and asks for the
//! offset, while the server may not have noticed the old connection is dead and still holds
//! the upload. Waiting for a TCP timeout would stall the resume for minutes, so a new request
//! asks the holder to stop: the holder keeps (fsyncs and counts) what it has received and
//! lets go, and the new request goes on with the true offset.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::sync::Locked;

/// The per-upload locks of one API process.
#[derive(Clone, Debug, Default)]
pub struct UploadLocks {
    slots: Arc<Mutex<HashMap<Uuid, Arc<Slot>>>>,
}

#[derive(Debug, Default)]
struct Slot {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Cancelled to ask the current holder to let go.
    holder_stop: Mutex<CancellationToken>,
}

/// Held while a request works on an upload; dropping it lets the next one in.
#[derive(Debug)]
pub struct UploadGuard {
    /// Cancelled when another request wants the upload: stop reading, keep what arrived.
    pub stop: CancellationToken,
    // Dropped before the slot reference, so the slot is forgotten once nobody uses it.
    guard: Option<OwnedMutexGuard<()>>,
    _slot: SlotRef,
}

/// A reference to an upload's slot that forgets the slot when it is the last user, also
/// when a request is dropped while it waits.
#[derive(Debug)]
struct SlotRef {
    slot: Arc<Slot>,
    id: Uuid,
    locks: UploadLocks,
}

impl Drop for SlotRef {
    fn drop(&mut self) {
        let mut slots = self.locks.slots.locked();
        // The map's reference and this one: nobody else holds or waits for it.
        if Arc::strong_count(&self.slot) == 2 {
            slots.remove(&self.id);
        }
    }
}

/// How often a waiting request asks the holder again (a holder that took over in between
/// has a new token to cancel).
const ASK_AGAIN: Duration = Duration::from_millis(100);

impl UploadLocks {
    /// Takes the upload's lock, asking a current holder to let go and waiting up to `wait`
    /// for it. `None`: the holder did not let go in time.
    pub async fn acquire(&self, id: Uuid, wait: Duration) -> Option<UploadGuard> {
        let slot = {
            let mut slots = self.slots.locked();
            SlotRef {
                slot: slots.entry(id).or_default().clone(),
                id,
                locks: self.clone(),
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        let guard = loop {
            if let Ok(guard) = slot.slot.lock.clone().try_lock_owned() {
                break guard;
            }
            slot.slot.holder_stop.locked().cancel();
            let pause =
                ASK_AGAIN.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            if let Ok(guard) =
                tokio::time::timeout(pause, slot.slot.lock.clone().lock_owned()).await
            {
                break guard;
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
        };
        let stop = CancellationToken::new();
        *slot.slot.holder_stop.locked() = stop.clone();
        Some(UploadGuard {
            stop,
            guard: Some(guard),
            _slot: slot,
        })
    }

    /// Uploads with a slot (held or waited for): the map does not grow with every upload.
    pub fn len(&self) -> usize {
        self.slots.locked().len()
    }

    /// Whether no upload has a slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for UploadGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_request_asks_the_holder_to_stop_and_gets_the_lock_once_it_lets_go() {
        let locks = UploadLocks::default();
        let id = Uuid::now_v7();
        let first = locks.acquire(id, Duration::from_secs(1)).await.unwrap();
        let stop = first.stop.clone();
        let holder = tokio::spawn(async move {
            stop.cancelled().await;
            drop(first);
        });
        let second = locks.acquire(id, Duration::from_secs(5)).await.unwrap();
        holder.await.unwrap();
        assert!(!second.stop.is_cancelled());
        drop(second);
        assert!(locks.is_empty(), "slots are forgotten once unused");
    }

    #[tokio::test]
    async fn a_holder_that_does_not_let_go_leaves_the_next_request_without_the_lock() {
        let locks = UploadLocks::default();
        let id = Uuid::now_v7();
        let stubborn = locks.acquire(id, Duration::from_secs(1)).await.unwrap();
        assert!(locks.acquire(id, Duration::from_millis(50)).await.is_none());
        assert!(stubborn.stop.is_cancelled(), "it was asked to stop");
        let other = locks
            .acquire(Uuid::now_v7(), Duration::from_millis(50))
            .await;
        assert!(other.is_some(), "other uploads are not held up");
        drop((stubborn, other));
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn a_waiter_dropped_while_it_waits_leaves_no_slot_behind() {
        let locks = UploadLocks::default();
        let id = Uuid::now_v7();
        let holder = locks.acquire(id, Duration::from_secs(1)).await.unwrap();
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { locks.acquire(id, Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(holder);
        let taken = waiter.await.unwrap();
        assert!(taken.is_some());
        drop(taken);
        assert!(locks.is_empty());

        let holder = locks.acquire(id, Duration::from_secs(1)).await.unwrap();
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { locks.acquire(id, Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        waiter.abort();
        let _ = waiter.await;
        drop(holder);
        assert!(
            locks.is_empty(),
            "the aborted waiter's slot reference went with it"
        );
    }
}
