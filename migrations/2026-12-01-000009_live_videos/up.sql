-- A live recording becomes a video (docs/live.md): once it has ended and its
-- init and every kept segment are in S3, one transaction makes its video, a `repackage` job
-- on the ordinary encoding queue and `video.accepted`. The job joins the segments without
-- re-encoding into the recording's original axis (one MP4, its own ledger row and CAS in
-- `recording_files`), then writes the VOD outputs and finalizes like any encode.

-- A video comes from exactly one source: an upload contract or a recording.
ALTER TABLE videos ALTER COLUMN upload_id DROP NOT NULL;
ALTER TABLE videos ADD COLUMN recording_id uuid UNIQUE REFERENCES recordings (id) ON DELETE CASCADE;
ALTER TABLE videos ADD CONSTRAINT videos_one_source CHECK ((upload_id IS NULL) <> (recording_id IS NULL));

-- What an attempt does: encode an uploaded original, or repackage a recording.
ALTER TABLE video_encoding_jobs ADD COLUMN kind text NOT NULL DEFAULT 'encode'
    CHECK (kind IN ('encode', 'repackage'));

-- The original axis of a recording: the joined MP4, spooled by the worker that made it and
-- landed by its node's sweeper like every other recording file.
ALTER TABLE recording_files DROP CONSTRAINT recording_files_axis_check;
ALTER TABLE recording_files ADD CONSTRAINT recording_files_axis_check
    CHECK (axis IN ('init', 'segment', 'original'));

-- Each round of a node's sweeper looks for its recordings that are live (idle end), ending
-- (cutoff) or ended (to become a video); finished ones (ready, failed) pile up and are
-- never looked at again.
CREATE INDEX recordings_open_idx ON recordings (node_id, state)
    WHERE state IN ('live', 'ending', 'ended');
