ALTER TABLE recording_files DROP COLUMN content_sha256;
