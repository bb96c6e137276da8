DROP TABLE tus_tail_pieces;
DROP TABLE tus_parts;
DROP TABLE tus_multiparts;
DELETE FROM uploads WHERE store = 's3';
ALTER TABLE uploads
    DROP CONSTRAINT uploads_vidq_has_a_store,
    ADD CONSTRAINT uploads_vidq_has_spool
        CHECK (via <> 'vidq' OR (spool_path IS NOT NULL AND node_id IS NOT NULL));
ALTER TABLE uploads DROP COLUMN store;
