//! Encoding jobs: the queue itself.
//!
//! The statements are grouped by who runs them: the confirm that enqueues (`enqueue`), the
//! worker that claims (`claim`) and ends its attempt (`finalize`), the reaper and the
//! operators (`operator`), the operators' reads (`views`), and a split video's head and parts
//! (`parts`). Callers use the names
//! re-exported here.
//!
//! Every comparison of `attempt_count` in these statements spells the attempt budget as a
//! literal, not a parameter: the planner must see it to use the last-attempt partial index
//! for the reaper and to rule it out for the claim. The test at the bottom of this file holds
//! those literals to [`MAX_ATTEMPTS`](crate::domain::job::MAX_ATTEMPTS).

/// Binds what every fenced transition takes: `$1` job id, `$2` claim token, then the
/// [`AttemptEnd`]'s outcome, error code and message as `$3`..`$5`. Defined here, before the
/// submodules, so that both the worker's (`finalize`) and the reaper's (`operator`)
/// statements can use it.
macro_rules! fenced_query {
    ($sql:expr, $id:expr, $token:expr, $end:expr) => {{
        use diesel::sql_types::{BigInt, Nullable, Text, Uuid as SqlUuid};
        $crate::db::prepared::prepared($sql)
            .bind::<BigInt, _>($id)
            .bind::<SqlUuid, _>($token)
            .bind::<Text, _>($end.outcome.as_str())
            .bind::<Nullable<Text>, _>($end.error.map(|e| e.0))
            .bind::<Nullable<Text>, _>($end.error.map(|e| e.1))
    }};
}

mod claim;
mod enqueue;
mod finalize;
mod operator;
pub mod parts;
mod views;

pub use claim::{
    CLAIM_SQL, ClaimedJob, claim, claim_some, claim_some_sql, heartbeat, with_synchronous_claims,
};
pub use enqueue::{insert, insert_all, lock_for_videos, notify_claimable};
pub(super) use finalize::LOG_ATTEMPT;
pub use finalize::{
    AttemptEnd, CLAIM_LOST_MESSAGE, COMPLETE_ALL_SQL, complete, complete_all, release, retry_later,
};
pub use operator::{DeadCandidate, cancel, dead_candidates, lock_status, mark_dead, requeue};
pub use views::{AttemptSummary, JobSummary, attempts_of, find, list};

/// The channel workers LISTEN on; a transaction that makes a job claimable NOTIFYs it.
pub const JOBS_CHANNEL: &str = "vidq_jobs";

#[cfg(test)]
mod tests {
    use crate::domain::job::MAX_ATTEMPTS;

    /// Every file of this module that holds statements.
    const SOURCES: [&str; 6] = [
        include_str!("claim.rs"),
        include_str!("parts.rs"),
        include_str!("enqueue.rs"),
        include_str!("finalize.rs"),
        include_str!("operator.rs"),
        include_str!("views.rs"),
    ];

    /// The statements keep the budget as a literal (the planner must see it to use the
    /// last-attempt partial index for the reaper and to rule it out for the claim), so this
    /// checks every comparison of `attempt_count` in this module against [`MAX_ATTEMPTS`].
    #[test]
    fn every_attempt_count_comparison_uses_max_attempts() {
        let mut seen = 0;
        for source in SOURCES {
            for op in ["attempt_count < ", "attempt_count >= "] {
                for (at, _) in source.match_indices(op) {
                    let rest = &source[at + op.len()..];
                    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    if digits.is_empty() {
                        continue;
                    }
                    assert_eq!(digits.parse::<i32>().unwrap(), MAX_ATTEMPTS, "{op}{digits}");
                    seen += 1;
                }
            }
        }
        assert!(seen >= 5, "found {seen} comparisons");
    }
}
