-- A repackage attempt now joins a live recording from S3 and puts the joined original under
-- its own attempt prefix, registered in video_artifacts like its other outputs. The original
-- rows earlier builds registered in recording_files and that never landed name spool files
-- on worker disks no sweeper serves: nothing will ever land them, and the job's next attempt
-- does not need them. Rows that did land stay (their objects are reconciled as before).
DELETE FROM recording_files WHERE axis = 'original' AND state <> 'uploaded';
