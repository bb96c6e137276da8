-- Per-user caps on unfinished work (VIDQ_MAX_OPEN_UPLOADS_PER_USER,
-- VIDQ_MAX_OPEN_RECORDINGS_PER_USER): each create counts the caller's open rows, so these
-- partial indexes hold only open rows and the count never walks a user's finished history.
CREATE INDEX uploads_open_owner_idx ON uploads (owner_id)
    WHERE state IN ('receiving', 'pending', 'uploaded');
CREATE INDEX recordings_open_owner_idx ON recordings (owner_id)
    WHERE state IN ('waiting', 'live', 'ending');

-- A tus upload's Upload-Metadata exactly as its client sent it: HEAD echoes it back.
ALTER TABLE uploads ADD COLUMN tus_metadata text;
