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
    slot: Arc<Slot>,
    id: Uuid,
    slots: UploadLocks,
    // Dropped before the slot is looked at, see `Drop`.
    guard: Option<OwnedMutexGuard<()>>,
}

impl UploadLocks {
    /// Takes the upload's lock, asking a current holder to let go and waiting up to `wait`
    /// for it. `None`: the holder did not let go in time.
    pub async fn acquire(&self, id: Uuid, wait: Duration) -> Option<UploadGuard> {
        let slot = {
            let mut slots = self.slots.lock().expect("upload locks");
            slots.entry(id).or_default().clone()
        };
        let guard = match slot.lock.clone().try_lock_owned() {
            Ok(guard) => Some(guard),
            Err(_) => {
                slot.holder_stop.lock().expect("holder token").cancel();
                tokio::time::timeout(wait, slot.lock.clone().lock_owned())
                    .await
                    .ok()
            }
        };
        let Some(guard) = guard else {
            self.forget_if_unused(id, &slot);
            return None;
        };
        let stop = CancellationToken::new();
        *slot.holder_stop.lock().expect("holder token") = stop.clone();
        Some(UploadGuard {
            stop,
            slot,
            id,
            slots: self.clone(),
            guard: Some(guard),
        })
    }

    /// Uploads with a slot (held or waited for): the map does not grow with every upload.
    pub fn len(&self) -> usize {
        self.slots.lock().expect("upload locks").len()
    }

    /// Whether no upload has a slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn forget_if_unused(&self, id: Uuid, slot: &Arc<Slot>) {
        let mut slots = self.slots.lock().expect("upload locks");
        // The map's reference and the caller's: nobody else holds or waits for it.
        if Arc::strong_count(slot) == 2 {
            slots.remove(&id);
        }
    }
}

impl Drop for UploadGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.slots.forget_if_unused(self.id, &self.slot);
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
}
