//! A worker's hold on a job ([`Claim`]) and the one place the claim statement is sent
//! ([`claim`]): by the claim loop for its free slots ([`super::runner`]), and ahead of a READY
//! finalize for the freed slots' next jobs ([`super::claim_ahead`]).

use std::time::Duration;

use diesel_async::AsyncPgConnection;

use super::JobError;
use crate::db;
use crate::domain::ids::{ClaimToken, VideoId};
use crate::domain::job::JobKind;
use crate::pipeline::AttemptPlan;

/// A worker's hold on a job.
#[derive(Clone, Debug)]
pub struct Claim {
    /// Job id.
    pub job_id: i64,
    /// Its video.
    pub video: VideoId,
    /// The fencing token.
    pub token: ClaimToken,
    /// The run (1, then one more per operator retry); names the keys with the attempt.
    pub run: i32,
    /// This attempt's number within its run.
    pub attempt: i32,
    /// Where the original is.
    pub original_key: String,
    /// What the attempt does.
    pub kind: JobKind,
    /// A part's head job and its number (`None`: the video's own job).
    pub part_of: Option<(i64, i32)>,
    /// Time to READY so far: the wait from enqueueing (the confirm, or an operator's retry)
    /// to the claim by the database's clock, plus this node's monotonic time since the
    /// claim; no two clocks are ever subtracted.
    pub waited: TimeSince,
}

/// A wait measured partly by the database (until the claim) and then by this process.
#[derive(Clone, Copy, Debug)]
pub struct TimeSince {
    before_claim: std::time::Duration,
    claimed: std::time::Instant,
}

impl TimeSince {
    /// The whole wait until now.
    pub fn until_now(&self) -> std::time::Duration {
        self.before_claim + self.claimed.elapsed()
    }
}

impl From<db::jobs::ClaimedJob> for Claim {
    fn from(job: db::jobs::ClaimedJob) -> Self {
        Self {
            job_id: job.id,
            video: job.video_id,
            token: job.claim_token,
            run: job.run,
            attempt: job.attempt_count,
            original_key: job.original_s3_key,
            kind: job.kind,
            part_of: job.parent_id.zip(job.part),
            waited: TimeSince {
                before_claim: std::time::Duration::try_from_secs_f64(job.queued_secs)
                    .unwrap_or_default(),
                claimed: std::time::Instant::now(),
            },
        }
    }
}

impl Claim {
    /// What the claimed attempt works on.
    pub fn plan(&self) -> AttemptPlan {
        AttemptPlan {
            job_id: self.job_id,
            part_of: self.part_of,
            video: self.video,
            run: self.run,
            attempt: self.attempt,
            original_key: self.original_key.clone(),
            kind: self.kind,
            claim_token: self.token,
        }
    }
}

/// Who claims the freed slots' next jobs ahead of their finalize ([`super::claim_ahead`]).
#[derive(Clone, Copy, Debug)]
pub struct NextClaim<'a> {
    /// Written to `claimed_by`.
    pub node: &'a str,
    /// The new claim's lease.
    pub lease: std::time::Duration,
}

/// Claims up to `slots` jobs for `node`, each leased for `lease`: the queue's only claim.
/// One slot sends the single-row claim statement, several the several-row one; either is
/// one statement, autocommitted, whatever else shares its flight.
pub(crate) async fn claim(
    c: &AsyncPgConnection,
    node: &str,
    lease: Duration,
    slots: usize,
) -> Result<Vec<Claim>, JobError> {
    let lease = lease.as_secs_f64();
    if slots == 1 {
        let job = db::jobs::claim(c, node, lease).await?;
        return Ok(job.map(Claim::from).into_iter().collect());
    }
    let jobs = db::jobs::claim_some(c, node, lease, slots).await?;
    Ok(jobs.into_iter().map(Claim::from).collect())
}
