ALTER TABLE videos RESET (fillfactor);
DROP INDEX videos_failed_at_idx;
CREATE INDEX videos_failed_idx ON videos (updated_at) WHERE status = 'failed';
ALTER TABLE videos DROP CONSTRAINT videos_failed_at_check;
ALTER TABLE videos DROP COLUMN failed_at;
