-- A video's READY update rewrites the row in place (a HOT update): no new entry in any of the
-- videos' indexes, only the new row version on the same page.
--
-- PostgreSQL can do that only when no index covers a column the update changes, in its key
-- or its predicate. `videos_failed_idx` (updated_at WHERE status = 'failed') covered both
-- `status` and `updated_at`, which every READY update changes, so each one added an entry to
-- all four indexes of the table. The failure's time now has a column of its own, set only
-- when a video fails; a READY update leaves it NULL, as it was.
ALTER TABLE videos ADD COLUMN failed_at timestamptz;
UPDATE videos SET failed_at = updated_at WHERE status = 'failed';
ALTER TABLE videos ADD CONSTRAINT videos_failed_at_check
    CHECK ((status = 'failed') = (failed_at IS NOT NULL));
DROP INDEX videos_failed_idx;
CREATE INDEX videos_failed_at_idx ON videos (failed_at) WHERE failed_at IS NOT NULL;
-- A queued row (about 130 bytes with its header) grows to about 370 when it becomes READY
-- (codecs, three keys), and the new version must fit on the row's own page. So new pages are
-- filled to 35% only: with a 110,000-row backlog drained by 8 workers, 80% of the READY
-- updates were then in place (55% at a fillfactor of 50, none before). READY rows fill the
-- rest, so the table ends about as large as its READY rows would make it anyway.
ALTER TABLE videos SET (fillfactor = 35);
