-- An attempt is written once, by whoever ends it, and the attempt a job completes is never
-- written twice: its claim already sits on the job row (token, node, attempt, run, and now
-- its start), so the ledger keeps only the attempts that ended otherwise (retry, failed,
-- lost, released, dead). Before, every claim inserted a ledger row (a heap tuple, three
-- index entries and a foreign-key check), probed for the attempt it superseded, and every
-- finalize updated that row again: about a tenth of PostgreSQL's work per job. The view
-- `job_attempts` shows both as one ledger, one row per attempt, as it was.
ALTER TABLE video_encoding_jobs ADD COLUMN claimed_at timestamptz;
ALTER TABLE job_attempts RENAME TO job_attempt_log;
ALTER INDEX job_attempts_pkey RENAME TO job_attempt_log_pkey;
ALTER INDEX job_attempts_claim_token_key RENAME TO job_attempt_log_claim_token_key;
ALTER INDEX job_attempts_job_idx RENAME TO job_attempt_log_job_idx;

-- Claims open at this moment move to their job rows; any other open row is an attempt whose
-- end nobody recorded, which the next claim would have closed as lost.
UPDATE video_encoding_jobs j
   SET claimed_at = a.started_at
  FROM job_attempt_log a
 WHERE a.claim_token = j.claim_token AND a.ended_at IS NULL AND j.status = 'PROCESSING';
DELETE FROM job_attempt_log a
 USING video_encoding_jobs j
 WHERE a.claim_token = j.claim_token AND a.ended_at IS NULL AND j.status = 'PROCESSING';
UPDATE job_attempt_log
   SET ended_at = statement_timestamp(), outcome = 'lost', error_code = 'lease_expired'
 WHERE ended_at IS NULL;
ALTER TABLE job_attempt_log ALTER COLUMN ended_at SET NOT NULL;
ALTER TABLE job_attempt_log ALTER COLUMN outcome SET NOT NULL;

-- Every attempt, one row each: the logged ones, and the job's own claim while it runs
-- (`ended_at` NULL) or once it completed, unless the log already has it (a FAILED finalize,
-- a cancel or a lost claim writes its row there). Log rows keep their ids; a job's own
-- attempt has none until it is logged.
CREATE VIEW job_attempts AS
SELECT id, job_id, attempt, claim_token, node_id, started_at, ended_at, outcome,
       error_code, error_message, run
  FROM job_attempt_log
UNION ALL
SELECT NULL::bigint, j.id, j.attempt_count, j.claim_token, j.claimed_by, j.claimed_at,
       CASE WHEN j.status = 'COMPLETED' THEN j.completed_at END,
       CASE WHEN j.status = 'COMPLETED' THEN 'completed' END,
       NULL::text, NULL::text, j.run
  FROM video_encoding_jobs j
 WHERE j.status IN ('PROCESSING', 'COMPLETED') AND j.claim_token IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM job_attempt_log a WHERE a.claim_token = j.claim_token);
