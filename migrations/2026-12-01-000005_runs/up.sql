-- Runs: an operator retry of a FAILED or DEAD video starts a new run of its job. Attempts
-- count from 1 again in each run (the CHECK on attempt_count stays 0..3, per run), and every
-- object key carries the run (videos/{id}/r{run}/a{attempt}/...), so a new run never writes
-- over, or registers a ledger row on top of, what an earlier run left.
ALTER TABLE video_encoding_jobs ADD COLUMN run integer NOT NULL DEFAULT 1 CHECK (run >= 1);
ALTER TABLE job_attempts ADD COLUMN run integer NOT NULL DEFAULT 1 CHECK (run >= 1);
ALTER TABLE video_artifacts ADD COLUMN run integer NOT NULL DEFAULT 1 CHECK (run >= 1);
ALTER TABLE video_artifacts DROP CONSTRAINT video_artifacts_video_id_attempt_axis_sequence_key;
ALTER TABLE video_artifacts ADD CONSTRAINT video_artifacts_video_id_run_attempt_axis_sequence_key
    UNIQUE (video_id, run, attempt, axis, sequence);
-- With live_attempt it names the live prefix: videos/{id}/r{live_run}/a{live_attempt}/.
ALTER TABLE videos ADD COLUMN live_run integer CHECK (live_run >= 1);
UPDATE videos SET live_run = 1 WHERE live_attempt IS NOT NULL;

-- Failure texts used to carry node paths (scratch directories, tool paths). What a client
-- reads is now a code and a fixed sentence; scrub what earlier failures stored.
UPDATE videos SET error_message = regexp_replace(error_message, '\S*/\S*', '[path]', 'g')
 WHERE error_message LIKE '%/%';
