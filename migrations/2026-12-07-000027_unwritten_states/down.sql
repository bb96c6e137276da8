DROP INDEX uploads_open_owner_idx;
CREATE INDEX uploads_open_owner_idx ON uploads (owner_id)
    WHERE state IN ('receiving', 'pending', 'uploaded');
ALTER DOMAIN video_status DROP CONSTRAINT video_status_check;
ALTER DOMAIN video_status ADD CONSTRAINT video_status_check
    CHECK (VALUE IN ('queued', 'processing', 'ready', 'failed'));
ALTER DOMAIN upload_state DROP CONSTRAINT upload_state_check;
ALTER DOMAIN upload_state ADD CONSTRAINT upload_state_check
    CHECK (VALUE IN ('receiving', 'pending', 'uploaded', 'confirmed', 'rejected', 'expired'));
