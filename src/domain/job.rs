//! Encoding job states and the retry budget.
//!
//! `PENDING -> PROCESSING -> COMPLETED`; `PROCESSING -> PENDING` (error with attempts left,
//! or a graceful release); `PROCESSING -> DEAD` (died in its last attempt). The budget is
//! also a CHECK in the schema, so no code path can exceed it.

use std::str::FromStr;

use super::upload::UnknownState;

/// Most attempts one run of a job may make (invariant I6; the schema's CHECK agrees). An
/// operator retry starts a new run with a fresh budget.
pub const MAX_ATTEMPTS: i32 = 3;

/// The run a confirmed upload's job starts in; each operator retry adds one.
pub const FIRST_RUN: i32 = 1;

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
