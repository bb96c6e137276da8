-- The SHA-256 (hex) of the bytes a recording file's row names, taken as they arrive. Two
-- PUTs of one file name can carry other bytes of the same length: the sweeper skips a PUT,
-- and marks a row uploaded, only when S3 holds the object with this digest, and a file sent
-- again after it landed is compared by it. NULL for rows from before digests.
ALTER TABLE recording_files ADD COLUMN content_sha256 text
    CHECK (content_sha256 ~ '^[0-9a-f]{64}$');
