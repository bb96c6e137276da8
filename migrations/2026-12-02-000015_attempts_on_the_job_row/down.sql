DROP VIEW job_attempts;
ALTER TABLE job_attempt_log ALTER COLUMN outcome DROP NOT NULL;
ALTER TABLE job_attempt_log ALTER COLUMN ended_at DROP NOT NULL;
ALTER TABLE job_attempt_log RENAME TO job_attempts;
ALTER INDEX job_attempt_log_pkey RENAME TO job_attempts_pkey;
ALTER INDEX job_attempt_log_claim_token_key RENAME TO job_attempts_claim_token_key;
ALTER INDEX job_attempt_log_job_idx RENAME TO job_attempts_job_idx;
-- The attempts the job rows carried become ledger rows again: open ones for running claims,
-- closed ones for completed jobs.
INSERT INTO job_attempts (job_id, run, attempt, claim_token, node_id, started_at, ended_at, outcome)
SELECT j.id, j.run, j.attempt_count, j.claim_token, j.claimed_by,
       coalesce(j.claimed_at, statement_timestamp()),
       CASE WHEN j.status = 'COMPLETED' THEN j.completed_at END,
       CASE WHEN j.status = 'COMPLETED' THEN 'completed' END
  FROM video_encoding_jobs j
 WHERE j.status IN ('PROCESSING', 'COMPLETED') AND j.claim_token IS NOT NULL
   AND j.claimed_by IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM job_attempts a WHERE a.claim_token = j.claim_token);
ALTER TABLE video_encoding_jobs DROP COLUMN claimed_at;
