DELETE FROM doomed_objects WHERE is_prefix AND key NOT LIKE '%/';
ALTER TABLE doomed_objects DROP CONSTRAINT doomed_objects_check;
ALTER TABLE doomed_objects ADD CONSTRAINT doomed_objects_check CHECK (NOT is_prefix OR key LIKE '%/');
