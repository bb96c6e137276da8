-- Split-and-stitch encoding (docs/architecture.md, "One long video on every worker"). A long
-- upload's job (the video's own job, the "head") probes the original and, in the transaction
-- that ends its attempt, writes the plan and one job per part: a chunk job per frame range
-- and an audio job. The head then waits as a `stitch` job that no worker can claim
-- (`available_at = 'infinity'`) until the transaction that completes its last part makes it
-- claimable. Parts are ordinary jobs on the same queue: the same claim, lease, heartbeat,
-- fences, retries and attempt log.
ALTER DOMAIN job_kind DROP CONSTRAINT job_kind_check;
ALTER DOMAIN job_kind ADD CONSTRAINT job_kind_check
    CHECK (VALUE IN ('encode', 'repackage', 'chunk', 'audio', 'stitch'));

ALTER TABLE video_encoding_jobs
    -- A part's head job; NULL for the video's own job.
    ADD COLUMN parent_id bigint REFERENCES video_encoding_jobs (id) ON DELETE CASCADE,
    -- A part's number: chunks 0..n-1 in frame order, then the audio.
    ADD COLUMN part count_of,
    -- The head's plan (frame rate, frame ranges, what the stitch checks), written with its parts.
    ADD COLUMN plan jsonb,
    -- Encode this video as one job, never split: set when a stitch could not pass its checks.
    ADD COLUMN whole boolean NOT NULL DEFAULT false;

-- One head job per video, as before; any number of parts beside it, one per number.
ALTER TABLE video_encoding_jobs DROP CONSTRAINT video_encoding_jobs_video_id_key;
CREATE UNIQUE INDEX video_encoding_jobs_head_idx ON video_encoding_jobs (video_id)
    WHERE parent_id IS NULL;
CREATE UNIQUE INDEX video_encoding_jobs_part_idx ON video_encoding_jobs (parent_id, part)
    WHERE parent_id IS NOT NULL;

-- A chunk's attempts write under their part's own prefix; the ledger keeps them apart from
-- the head's attempts (and from each other) by the part.
ALTER TABLE video_artifacts ADD COLUMN part count_of;
ALTER TABLE video_artifacts DROP CONSTRAINT video_artifacts_video_id_run_attempt_axis_sequence_key;
CREATE UNIQUE INDEX video_artifacts_attempt_object_idx
    ON video_artifacts (video_id, run, coalesce(part, -1), attempt, axis, sequence);
ALTER TABLE video_artifacts DROP CONSTRAINT video_artifacts_axis_check;
ALTER TABLE video_artifacts ADD CONSTRAINT video_artifacts_axis_check
    CHECK (axis IN ('original', 'init', 'segment', 'playlist', 'thumbnail', 'mp4', 'chunk', 'audio'));

-- The head's planning attempt ends as `planned`: it made the plan, and its job waits for the parts.
ALTER TABLE job_attempt_log DROP CONSTRAINT job_attempts_outcome_check;
ALTER TABLE job_attempt_log ADD CONSTRAINT job_attempts_outcome_check
    CHECK (outcome IN ('completed', 'failed', 'retry', 'lost', 'released', 'dead', 'planned'));
