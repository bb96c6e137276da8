DROP INDEX recordings_open_idx;
DELETE FROM recording_files WHERE axis = 'original';
ALTER TABLE recording_files DROP CONSTRAINT recording_files_axis_check;
ALTER TABLE recording_files ADD CONSTRAINT recording_files_axis_check CHECK (axis IN ('init', 'segment'));
ALTER TABLE video_encoding_jobs DROP COLUMN kind;
DELETE FROM videos WHERE recording_id IS NOT NULL;
ALTER TABLE videos DROP CONSTRAINT videos_one_source;
ALTER TABLE videos DROP COLUMN recording_id;
ALTER TABLE videos ALTER COLUMN upload_id SET NOT NULL;
