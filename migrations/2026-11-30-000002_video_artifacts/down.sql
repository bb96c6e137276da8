DROP TABLE video_artifacts;
