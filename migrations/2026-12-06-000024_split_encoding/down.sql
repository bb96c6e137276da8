ALTER TABLE job_attempt_log DROP CONSTRAINT job_attempts_outcome_check;
DELETE FROM job_attempt_log WHERE outcome = 'planned';
ALTER TABLE job_attempt_log ADD CONSTRAINT job_attempts_outcome_check
    CHECK (outcome IN ('completed', 'failed', 'retry', 'lost', 'released', 'dead'));

DELETE FROM video_artifacts WHERE part IS NOT NULL OR axis IN ('chunk', 'audio');
ALTER TABLE video_artifacts DROP CONSTRAINT video_artifacts_axis_check;
ALTER TABLE video_artifacts ADD CONSTRAINT video_artifacts_axis_check
    CHECK (axis IN ('original', 'init', 'segment', 'playlist', 'thumbnail', 'mp4'));
DROP INDEX video_artifacts_attempt_object_idx;
ALTER TABLE video_artifacts ADD CONSTRAINT video_artifacts_video_id_run_attempt_axis_sequence_key
    UNIQUE (video_id, run, attempt, axis, sequence);
ALTER TABLE video_artifacts DROP COLUMN part;

DELETE FROM video_encoding_jobs WHERE parent_id IS NOT NULL;
UPDATE video_encoding_jobs SET kind = 'encode' WHERE kind = 'stitch';
DROP INDEX video_encoding_jobs_part_idx;
DROP INDEX video_encoding_jobs_head_idx;
ALTER TABLE video_encoding_jobs ADD CONSTRAINT video_encoding_jobs_video_id_key UNIQUE (video_id);
ALTER TABLE video_encoding_jobs DROP COLUMN whole, DROP COLUMN plan, DROP COLUMN part,
    DROP COLUMN parent_id;

ALTER DOMAIN job_kind DROP CONSTRAINT job_kind_check;
ALTER DOMAIN job_kind ADD CONSTRAINT job_kind_check CHECK (VALUE IN ('encode', 'repackage'));
