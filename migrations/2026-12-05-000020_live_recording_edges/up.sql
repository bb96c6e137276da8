-- Three edges of live recordings (README, "Live recordings").
--
-- A recording created and never streamed ends after VIDQ_LIVE_WAITING_TTL_SECS with the
-- reason `expired` (then fails: nothing playable), so it leaves the dashboard and the
-- open-recordings gauge instead of waiting forever. Its node's sweeper finds them by age.
ALTER TABLE recordings DROP CONSTRAINT recordings_end_reason_check;
ALTER TABLE recordings ADD CONSTRAINT recordings_end_reason_check
    CHECK (end_reason IN ('endlist', 'ended_by_client', 'idle', 'expired'));
CREATE INDEX recordings_waiting_idx ON recordings (node_id, created_at)
    WHERE state = 'waiting';

-- What the encoder's first playlist said, kept for the life of the recording: the number of
-- its first segment (`#EXT-X-MEDIA-SEQUENCE`; FFmpeg's `-start_number`), where the live
-- playlist starts, and its `#EXT-X-TARGETDURATION`, which the live playlist repeats and
-- never changes (a player may not see it change). NULL until that playlist arrives.
ALTER TABLE recordings
    ADD COLUMN first_sequence int4 CHECK (first_sequence >= 0),
    ADD COLUMN target_duration_secs int4 CHECK (target_duration_secs BETWEEN 1 AND 86400);
