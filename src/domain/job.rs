//! Encoding job states and the retry budget.
//!
//! `PENDING -> PROCESSING -> COMPLETED`; `PROCESSING -> PENDING` (error with attempts left,
//! or a graceful release); `PROCESSING -> DEAD` (died in its last attempt). The budget is
//! also a CHECK in the schema, so no code path can exceed it. Each attempt ends with one
//! [`Outcome`], recorded in the attempt ledger.

/// Most attempts one run of a job may make (invariant I6; the schema's CHECK agrees). An
/// operator retry starts a new run with a fresh budget.
pub const MAX_ATTEMPTS: i32 = 3;

/// The run a confirmed upload's job starts in; each operator retry adds one.
pub const FIRST_RUN: i32 = 1;

spelled_states! {
    /// Where an encoding job is in the queue.
    pub enum JobStatus {
        /// Waiting to be claimed once `available_at` has passed.
        Pending = "PENDING",
        /// Claimed by a worker under a lease.
        Processing = "PROCESSING",
        /// Finalized (READY or FAILED) by the claim holder.
        Completed = "COMPLETED",
        /// Its last attempt's lease ran out.
        Dead = "DEAD",
    }
}

spelled_states! {
    /// What a job's attempts do.
    pub enum JobKind {
        /// Probe and encode an uploaded original into the playback ladder.
        Encode = "encode",
        /// Join a finished live recording's segments without re-encoding into its original
        /// axis (one MP4), then write its VOD outputs from that.
        Repackage = "repackage",
        /// One frame range of a split video, every rendition from one decode (a part).
        Chunk = "chunk",
        /// The whole audio of a split video, encoded once (a part).
        Audio = "audio",
        /// A split video's own job once planned: waits (unclaimable) until its last part
        /// completes, then joins the parts into the playback outputs and finalizes READY.
        Stitch = "stitch",
    }
}

spelled_states! {
    /// How an attempt ended.
    pub enum Outcome {
        /// Finalized READY.
        Completed = "completed",
        /// Finalized FAILED (permanent error, or the last retryable one).
        Failed = "failed",
        /// Went back to PENDING to be tried again.
        Retry = "retry",
        /// Its claim was lost (lease expired, cancelled, video deleted).
        Lost = "lost",
        /// Handed back on shutdown.
        Released = "released",
        /// Died in the last attempt; the reaper closed it.
        Dead = "dead",
        /// Split the video into parts; the job waits for them as its stitch.
        Planned = "planned",
    }
}

impl JobKind {
    /// Whether a job of this kind is a part of a split video (it has a head job).
    pub fn is_part(self) -> bool {
        matches!(self, Self::Chunk | Self::Audio)
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
