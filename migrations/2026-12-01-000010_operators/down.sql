DROP INDEX videos_failed_idx;
DROP INDEX video_encoding_jobs_completed_idx;
DROP INDEX video_encoding_jobs_dead_idx;
DROP TABLE nodes;
DROP TABLE admin_sessions;
ALTER TABLE users DROP COLUMN is_admin;
