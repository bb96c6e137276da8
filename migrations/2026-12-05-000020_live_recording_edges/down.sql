ALTER TABLE recordings DROP COLUMN first_sequence, DROP COLUMN target_duration_secs;
DROP INDEX recordings_waiting_idx;
UPDATE recordings SET end_reason = 'idle' WHERE end_reason = 'expired';
ALTER TABLE recordings DROP CONSTRAINT recordings_end_reason_check;
ALTER TABLE recordings ADD CONSTRAINT recordings_end_reason_check
    CHECK (end_reason IN ('endlist', 'ended_by_client', 'idle'));
