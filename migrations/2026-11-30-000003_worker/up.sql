-- Jobs in flight on their last attempt: the reaper finds the ones whose lease ran out here
-- (they can never be claimed again, so they become DEAD and their video FAILED). The
-- predicate includes attempt_count >= 3, which the claim's own predicate (attempt_count < 3)
-- excludes, so the planner can never pick this index for the claim.
CREATE INDEX video_encoding_jobs_last_attempt_lease_idx
    ON video_encoding_jobs (lease_until)
    WHERE status = 'PROCESSING' AND attempt_count >= 3;
