//! The workers under test: the real runner with a job body that does nothing but count, laid
//! out as processes of a number of slots each. `vidq bench queue --sustained` uses them too.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::db;
use crate::domain::ids::VideoId;
use crate::domain::media::MediaError;
use crate::pipeline::{AttemptOutput, AttemptPlan, Attempted};
use crate::queue::JobBody;
use crate::queue::line::Listeners;
use crate::queue::runner::{ClaimObserver, Runner, WorkerSettings};

/// A job body that succeeds at once and counts READY commits.
pub(in crate::bench) struct Noop {
    pub(in crate::bench) ready: AtomicUsize,
    pub(in crate::bench) target: usize,
    pub(in crate::bench) reached: Notify,
}

impl JobBody for Noop {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Attempted, MediaError>> {
        succeed_at_once(plan)
    }

    fn after_ready(&self, _: VideoId, _: i32, _: i32, _: Vec<String>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self.ready.fetch_add(1, Ordering::SeqCst) + 1 == self.target {
                self.reached.notify_one();
            }
        })
    }
}

/// What a no-op body answers: the attempt's placeholder outputs, at once.
pub(super) fn succeed_at_once(plan: &AttemptPlan) -> BoxFuture<'_, Result<Attempted, MediaError>> {
    Box::pin(async move { Ok(AttemptOutput::placeholder(plan).into()) })
}

fn settings(n: u32, slots: u32, listeners: Listeners) -> WorkerSettings {
    WorkerSettings {
        node_id: format!("bench-{n}"),
        slots,
        poll: Duration::from_secs(1),
        lease: Duration::from_secs(60),
        heartbeat: None,
        deadline: Duration::from_secs(60),
        retry_delay: Duration::from_secs(5),
        listeners,
        tool_failures: 0,
        tool_recheck: Duration::from_secs(60),
    }
}

/// Starts `workers` slots in all, as processes of `slots` slots each (the last one may have
/// fewer).
pub(in crate::bench) async fn start_workers(
    url: &str,
    workers: u32,
    slots: u32,
    body: Arc<Noop>,
    listeners: Listeners,
    on_claim: Option<ClaimObserver>,
    stop: &CancellationToken,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut handles = Vec::new();
    let slots = slots.clamp(1, workers.max(1));
    for n in 0..workers.div_ceil(slots) {
        let runner = Arc::new(Runner {
            pool: db::connect(url, crate::roles::worker::WORKER_POOL_SIZE).await?,
            database_url: url.to_owned(),
            body: body.clone(),
            settings: settings(n, slots.min(workers - n * slots), listeners),
            on_claim: on_claim.clone(),
            health: Default::default(),
        });
        handles.push(tokio::spawn(runner.run(stop.clone())));
    }
    Ok(handles)
}
