ALTER TABLE recordings DROP CONSTRAINT recordings_end_reason_check;
ALTER TABLE recordings ADD CONSTRAINT recordings_end_reason_check
    CHECK (end_reason IN ('endlist', 'ended_by_client', 'idle', 'expired'));
ALTER TABLE recordings DROP COLUMN lost_files;
DROP TABLE login_tries;
DROP TABLE doomed_objects;
