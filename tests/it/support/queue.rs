//! Queue helpers: worker settings for tests, an in-process worker, claims sent by hand and
//! their leases ended on demand, READY finalizes sent by hand with next claims riding ahead,
//! the video id of an API answer, and the checks every "each job once" test ends with.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use vidq::db::DbPool;
use vidq::domain::ids::VideoId;
use vidq::queue::claim_ahead::{Heard, NextJob, Rider, Riders};
use vidq::queue::complete::ReadyAttempt;
use vidq::queue::runner::{ClaimObserver, Runner, WorkerSettings};
use vidq::queue::{Claim, JobBody, JobError, NextClaim};

use crate::support::app::TestApp;
use crate::support::scripted::Scripted;

pub fn fast_settings(node: &str) -> WorkerSettings {
    WorkerSettings {
        node_id: node.to_owned(),
        slots: 1,
        poll: Duration::from_millis(50),
        lease: Duration::from_secs(2),
        heartbeat: Some(Duration::from_millis(400)),
        deadline: Duration::from_secs(60),
        retry_delay: Duration::from_millis(50),
        listeners: vidq::queue::line::Listeners::HeadOfLine,
        tool_failures: 3,
        tool_recheck: Duration::from_secs(60),
    }
}

pub struct Worker {
    pub stop: CancellationToken,
    pub handle: tokio::task::JoinHandle<()>,
}

impl Worker {
    pub async fn start<B: JobBody>(url: &str, body: Arc<B>, settings: WorkerSettings) -> Self {
        Self::observed(url, body, settings, None).await
    }

    /// Like [`Worker::start`], calling `on_claim` after every claim statement.
    pub async fn observed<B: JobBody>(
        url: &str,
        body: Arc<B>,
        settings: WorkerSettings,
        on_claim: Option<ClaimObserver>,
    ) -> Self {
        let pool = vidq::db::connect(url, 2).await.unwrap();
        let runner = Arc::new(Runner {
            pool,
            database_url: url.to_owned(),
            body,
            settings,
            on_claim,
            health: Default::default(),
        });
        let stop = CancellationToken::new();
        let handle = tokio::spawn(runner.run(stop.clone()));
        Self { stop, handle }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(40), self.handle)
            .await
            .unwrap()
            .unwrap();
    }
}

pub fn video_id(video: &serde_json::Value) -> VideoId {
    video["id"].as_str().unwrap().parse().unwrap()
}

/// After `n` jobs ran with `body`: no two attempts of a job overlapped (I2), each ran once,
/// on its first attempt, its video is READY, and it made exactly one terminal event (I4).
pub async fn each_job_ran_once_and_announced_once(app: &TestApp, body: &Scripted, n: i64) {
    assert_eq!(
        *body.max_overlap.lock().unwrap(),
        1,
        "no two live claims of one job overlap (I2)"
    );
    let started = i64::try_from(body.started.lock().unwrap().len()).unwrap();
    assert_eq!(started, n, "each job ran once");
    assert_eq!(
        app.count("SELECT count(*) AS n FROM video_encoding_jobs WHERE attempt_count <> 1")
            .await,
        0
    );
    assert_eq!(
        app.count("SELECT count(*) AS n FROM videos WHERE status = 'ready'")
            .await,
        n
    );
    // I4: exactly one terminal event per video.
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM (SELECT video_id FROM notification_outbox
               WHERE event_type IN ('video.ready', 'video.failed') GROUP BY video_id HAVING count(*) = 1) once"
        )
        .await,
        n
    );
    assert_eq!(
        app.count(
            "SELECT count(*) AS n FROM notification_outbox WHERE event_type <> 'video.accepted'"
        )
        .await,
        n
    );
}

pub async fn claim(app: &TestApp, node: &str, lease_secs: f64) -> Option<Claim> {
    let conn = app.pool.get().await.unwrap();
    vidq::db::jobs::claim(&conn, node, lease_secs)
        .await
        .unwrap()
        .map(Claim::from)
}

/// Ends `claim`'s lease now, as if its time had run out while nobody renewed it: the job's
/// `lease_until` is moved into the past and nothing else changes, so the next claim takes
/// the job over at once (and logs this attempt as lost), with no test waiting out a lease.
pub async fn expire_lease(app: &TestApp, claim: &Claim) {
    let expired = app
        .count(&format!(
            "WITH expired AS (
                UPDATE video_encoding_jobs SET lease_until = statement_timestamp() - interval '1 second'
                 WHERE id = {} AND claim_token = '{}' AND status = 'PROCESSING' RETURNING 1)
             SELECT count(*) AS n FROM expired",
            claim.job_id, claim.token
        ))
        .await;
    assert_eq!(
        expired, 1,
        "the claim still held its job when its lease was ended"
    );
}

/// Who claims the next jobs of the riders built here.
pub const RIDERS_NODE: &str = "batcher";

/// `riding.len()` slots, those where it is true asking for their next jobs, claimed as
/// [`RIDERS_NODE`] with a 30 s lease; each asking slot's listener, in order.
pub fn riders(riding: &[bool]) -> (Riders<'static>, Vec<Option<NextJob>>) {
    let mut asking = Vec::new();
    let listeners = riding
        .iter()
        .map(|&rides| {
            rides.then(|| {
                let (rider, next) = Rider::new();
                asking.push(rider);
                next
            })
        })
        .collect();
    let next = NextClaim {
        node: RIDERS_NODE,
        lease: Duration::from_secs(30),
    };
    (Riders::new(next, asking), listeners)
}

/// The READY of `claim` with a placeholder output.
pub fn ready(claim: &Claim) -> ReadyAttempt {
    ReadyAttempt {
        claim: claim.clone(),
        output: crate::support::scripted::output(&claim.plan()),
    }
}

/// Finalizes `attempts` READY as a worker does, `riders`' claim ahead of the first
/// transaction; returns each finalize's answer and the jobs claimed for riders nobody
/// listened to any more.
pub async fn finalize_riding(
    pool: &DbPool,
    attempts: &[ReadyAttempt],
    riders: Riders<'_>,
) -> (Vec<Result<(), JobError>>, Vec<Claim>) {
    let ahead = async move |c: &diesel_async::AsyncPgConnection| riders.claim(c).await;
    let (answers, orphans) =
        vidq::queue::complete::finalize_ready_all(pool, attempts, Some(ahead)).await;
    (
        answers,
        orphans.map(|orphans| orphans.0).unwrap_or_default(),
    )
}

/// Finalizes `attempts` READY as a worker does, no claim ahead.
pub async fn finalize_together(
    pool: &DbPool,
    attempts: &[ReadyAttempt],
) -> Vec<Result<(), JobError>> {
    finalize_riding(pool, attempts, riders(&[]).0).await.0
}

/// The claim a rider heard of (`None`: the queue was empty); any other answer fails the test.
pub async fn claim_heard(next: NextJob) -> Option<Claim> {
    match next.heard(&CancellationToken::new()).await {
        Heard::Job(job) => Some(job),
        Heard::QueueEmpty => None,
        other => panic!("the rider heard {other:?}"),
    }
}

/// The id of the job a rider heard of, as [`claim_heard`].
pub async fn job_heard(next: NextJob) -> Option<i64> {
    claim_heard(next).await.map(|job| job.job_id)
}
