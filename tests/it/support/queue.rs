//! Queue helpers: worker settings for tests, an in-process worker, claims sent by hand and
//! their leases ended on demand, the video id of an API answer, and the checks every "each
//! job once" test ends with.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use vidq::domain::ids::VideoId;
use vidq::queue::Claim;
use vidq::queue::JobBody;
use vidq::queue::runner::{ClaimObserver, Runner, WorkerSettings};

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
