-- A READY owes the bucket the parts of a split video's run as one prefix, `videos/<id>/r<n>/p`,
-- which covers `p1/`, `p2/`, ... and nothing else of the video. A prefix still ends in '/'
-- otherwise, so no prefix can reach past the directory it names.
ALTER TABLE doomed_objects DROP CONSTRAINT doomed_objects_check;
ALTER TABLE doomed_objects ADD CONSTRAINT doomed_objects_check
    CHECK (NOT is_prefix OR key LIKE '%/' OR key ~ '^videos/[^/]+/r[0-9]+/p$');
