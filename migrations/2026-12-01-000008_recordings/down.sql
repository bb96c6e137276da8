DROP TABLE recording_files;
DROP TABLE recordings;
