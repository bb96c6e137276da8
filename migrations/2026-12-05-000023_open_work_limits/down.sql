ALTER TABLE uploads DROP COLUMN tus_metadata;
DROP INDEX recordings_open_owner_idx;
DROP INDEX uploads_open_owner_idx;
