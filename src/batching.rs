//! Work in groups: callers queue items, and a few taker tasks each take everything queued
//! when they are free (at least one item, at most a set number) and handle it together,
//! answering each caller on its own.
//!
//! This is how the API commits confirms ([`crate::app::confirm_batch`]), reads video
//! statuses ([`crate::app::status_reads`]) and how a worker with several slots finalizes
//! ([`crate::queue::complete`]): one statement, commit or round trip shared by whatever
//! arrived while the last one was out.
//!
//! Nothing waits for a group to fill: an item on a quiet node is taken at once, alone.
//! Groups grow only while every taker is busy, which is when the work behind them (usually
//! PostgreSQL) is slower than the callers, and sharing its fixed costs pays.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Mutex, mpsc, oneshot};

/// One queued item and where its answer goes.
#[derive(Debug)]
pub struct Waiting<T, A> {
    /// What the caller queued.
    pub item: T,
    /// The caller's answer; sending fails (giving the answer back) when the caller has gone.
    pub answer: oneshot::Sender<A>,
}

/// Why [`Groups::submit`] has no answer.
#[derive(Debug)]
pub enum Unanswered<T> {
    /// The takers have ended (every clone of the queue's other end is gone, or they
    /// panicked): the item was never taken, and is given back.
    NotTaken(T),
    /// A taker took the item and ended without answering (a panic): whatever the item's
    /// work was, it may or may not have happened.
    Lost,
}

/// The queue in front of the takers. Cloning shares it; the takers end once every clone is
/// dropped and what was queued is handled.
pub struct Groups<T, A> {
    queue: mpsc::Sender<Waiting<T, A>>,
}

impl<T, A> Clone for Groups<T, A> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
        }
    }
}

impl<T, A> std::fmt::Debug for Groups<T, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field(
                "queued",
                &(self.queue.max_capacity() - self.queue.capacity()),
            )
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static, A: Send + 'static> Groups<T, A> {
    /// Starts `takers` tasks on the current runtime, each handing groups of at most `most`
    /// items to `handle`, which must answer every item of its group. At most `queued` items
    /// wait; beyond that [`Self::submit`] waits to queue, so the callers' own concurrency
    /// (the HTTP layer's, the worker's slots) bounds what is in flight, not this buffer.
    pub fn start<H, F>(takers: usize, most: usize, queued: usize, handle: H) -> Self
    where
        H: Fn(Vec<Waiting<T, A>>) -> F + Clone + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let most = most.max(1);
        let (queue, waiting) = mpsc::channel(queued.max(1));
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..takers.max(1) {
            tokio::spawn(take_groups(waiting.clone(), most, handle.clone()));
        }
        Self { queue }
    }

    /// Queues `item` for the next group and waits for its answer.
    pub async fn submit(&self, item: T) -> Result<A, Unanswered<T>> {
        let (answer, answered) = oneshot::channel();
        if let Err(refused) = self.queue.send(Waiting { item, answer }).await {
            return Err(Unanswered::NotTaken(refused.0.item));
        }
        answered.await.map_err(|_| Unanswered::Lost)
    }
}

/// One taker: takes what is queued, hands it to `handle`, and goes back for more.
async fn take_groups<T, A, H, F>(
    waiting: Arc<Mutex<mpsc::Receiver<Waiting<T, A>>>>,
    most: usize,
    handle: H,
) where
    H: Fn(Vec<Waiting<T, A>>) -> F,
    F: Future<Output = ()>,
{
    let mut group = Vec::with_capacity(most);
    // The lock is held only while taking: another taker takes the next group while this
    // one's is being handled.
    while waiting.lock().await.recv_many(&mut group, most).await > 0 {
        handle(std::mem::replace(&mut group, Vec::with_capacity(most))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn items_that_queue_while_the_taker_is_busy_go_together_and_each_hears_its_own() {
        let (release, released) = tokio::sync::watch::channel(false);
        let (started, mut taken) = mpsc::unbounded_channel();
        let groups = Groups::start(1, 8, 64, move |group: Vec<Waiting<u32, u32>>| {
            let (started, mut released) = (started.clone(), released.clone());
            async move {
                started.send(group.len()).unwrap();
                // Hold the first group until every other item is queued behind it.
                let _ = released.wait_for(|go| *go).await;
                for waiting in group {
                    let _ = waiting.answer.send(waiting.item * 10);
                }
            }
        });
        let first = tokio::spawn({
            let groups = groups.clone();
            async move { groups.submit(0).await.unwrap() }
        });
        assert_eq!(taken.recv().await, Some(1), "an item alone goes at once");
        let rest: Vec<_> = (1..=12)
            .map(|i| {
                let groups = groups.clone();
                tokio::spawn(async move { (i, groups.submit(i).await.unwrap()) })
            })
            .collect();
        while groups.queue.max_capacity() - groups.queue.capacity() < 12 {
            tokio::task::yield_now().await;
        }
        release.send(true).unwrap();
        assert_eq!(first.await.unwrap(), 0);
        for task in rest {
            let (i, answer) = task.await.unwrap();
            assert_eq!(answer, i * 10, "item {i} heard another's answer");
        }
        assert_eq!(taken.recv().await, Some(8), "the queued items go together");
        assert_eq!(taken.recv().await, Some(4));
    }

    #[tokio::test]
    async fn a_taker_that_dies_with_an_item_leaves_it_lost_not_hanging() {
        let groups: Groups<u32, u32> =
            Groups::start(1, 4, 4, |_group: Vec<Waiting<u32, u32>>| async {
                panic!("a taker fails")
            });
        assert!(matches!(groups.submit(1).await, Err(Unanswered::Lost)));
        // Its only taker is gone: the next item comes back untaken.
        assert!(matches!(
            groups.submit(2).await,
            Err(Unanswered::NotTaken(2))
        ));
    }
}
