DELETE FROM uploads WHERE state = 'receiving';
ALTER TABLE uploads DROP CONSTRAINT uploads_state_check;
ALTER TABLE uploads ADD CONSTRAINT uploads_state_check
    CHECK (state IN ('pending', 'uploaded', 'confirmed', 'rejected', 'expired'));
ALTER TABLE uploads
    DROP CONSTRAINT uploads_vidq_has_spool,
    DROP COLUMN claimed_until,
    DROP COLUMN last_error,
    DROP COLUMN next_try_at,
    DROP COLUMN tries,
    DROP COLUMN checksum,
    DROP COLUMN node_id,
    DROP COLUMN spool_path,
    DROP COLUMN received_bytes,
    DROP COLUMN via;
