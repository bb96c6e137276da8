//! Encoding job states and the retry budget.
//!
//! `PENDING -> PROCESSING -> COMPLETED`; `PROCESSING -> PENDING` (error with attempts left,
//! or a graceful release); `PROCESSING -> DEAD` (died in its last attempt). The budget is
//! also a CHECK in the schema, so no code path can exceed it. Each attempt ends with one
//! [`Outcome`], recorded in the attempt ledger.

use std::str::FromStr;

use super::upload::UnknownState;

/// Most attempts one job may ever make (invariant I6; the schema's CHECK agrees).
pub const MAX_ATTEMPTS: i32 = 3;

/// Where an encoding job is in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStatus {
    /// Waiting to be claimed once `available_at` has passed.
    Pending,
    /// Claimed by a worker under a lease.
    Processing,
    /// Finalized (READY or FAILED) by the claim holder.
    Completed,
    /// Its last attempt's lease ran out.
    Dead,
}

impl JobStatus {
    /// Every status, in the order of the life of a job.
    pub const ALL: [Self; 4] = [Self::Pending, Self::Processing, Self::Completed, Self::Dead];

    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Processing => "PROCESSING",
            Self::Completed => "COMPLETED",
            Self::Dead => "DEAD",
        }
    }
}

impl FromStr for JobStatus {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "PENDING" => Self::Pending,
            "PROCESSING" => Self::Processing,
            "COMPLETED" => Self::Completed,
            "DEAD" => Self::Dead,
            other => return Err(UnknownState(other.to_owned())),
        })
    }
}

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Finalized READY.
    Completed,
    /// Finalized FAILED (permanent error, or the last retryable one).
    Failed,
    /// Went back to PENDING to be tried again.
    Retry,
    /// Its claim was lost (lease expired, cancelled, video deleted).
    Lost,
    /// Handed back on shutdown.
    Released,
    /// Died in the last attempt; the reaper closed it.
    Dead,
}

impl Outcome {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Retry => "retry",
            Self::Lost => "lost",
            Self::Released => "released",
            Self::Dead => "dead",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for s in [
            JobStatus::Pending,
            JobStatus::Processing,
            JobStatus::Completed,
            JobStatus::Dead,
        ] {
            assert_eq!(s.as_str().parse::<JobStatus>().unwrap(), s);
        }
    }
}
