ALTER TABLE videos DROP COLUMN live_run;
ALTER TABLE video_artifacts DROP CONSTRAINT video_artifacts_video_id_run_attempt_axis_sequence_key;
-- Fails if two runs registered the same (attempt, axis, sequence): drop the older runs' rows first.
ALTER TABLE video_artifacts ADD CONSTRAINT video_artifacts_video_id_attempt_axis_sequence_key
    UNIQUE (video_id, attempt, axis, sequence);
ALTER TABLE video_artifacts DROP COLUMN run;
ALTER TABLE job_attempts DROP COLUMN run;
ALTER TABLE video_encoding_jobs DROP COLUMN run;
