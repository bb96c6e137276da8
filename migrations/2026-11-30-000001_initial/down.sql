DROP TABLE notification_outbox;
DROP TABLE job_attempts;
DROP TABLE video_encoding_jobs;
DROP TABLE videos;
DROP TABLE uploads;
DROP TABLE users;
