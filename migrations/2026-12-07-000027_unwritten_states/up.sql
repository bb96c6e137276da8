-- Two states the schema allowed and nothing ever wrote: an upload's `uploaded` (vidq's
-- sweeper and the confirm move a contract from `pending` to `confirmed` in one step, after
-- the HEAD or PUT) and a video's `processing` (the API reports a queued video whose job is
-- claimed as processing; the row stays `queued`). A row in either could only be made by
-- hand, and the code would not know what to do with it.
ALTER DOMAIN upload_state DROP CONSTRAINT upload_state_check;
ALTER DOMAIN upload_state ADD CONSTRAINT upload_state_check
    CHECK (VALUE IN ('receiving', 'pending', 'confirmed', 'rejected', 'expired'));
ALTER DOMAIN video_status DROP CONSTRAINT video_status_check;
ALTER DOMAIN video_status ADD CONSTRAINT video_status_check
    CHECK (VALUE IN ('queued', 'ready', 'failed'));

-- The per-user count of open uploads reads this index: its predicate names the open states.
DROP INDEX uploads_open_owner_idx;
CREATE INDEX uploads_open_owner_idx ON uploads (owner_id)
    WHERE state IN ('receiving', 'pending');
