-- Two tus stores (README, "Resumable uploads: two stores"). `spool`: the bytes go to the
-- node's spool and its sweeper PUTs them, as before. `s3`: each upload is an S3 multipart
-- upload on its final key, and any API node takes any of its requests, since the offset,
-- the parts and the tail live here rather than on one node's disk.
ALTER TABLE uploads ADD COLUMN store text CHECK (store IN ('spool', 's3'));
UPDATE uploads SET store = 'spool' WHERE via = 'vidq';
ALTER TABLE uploads
    DROP CONSTRAINT uploads_vidq_has_spool,
    ADD CONSTRAINT uploads_vidq_has_a_store CHECK (
        (via = 'vidq') = (store IS NOT NULL)
        AND (store IS DISTINCT FROM 'spool' OR (spool_path IS NOT NULL AND node_id IS NOT NULL)));

-- The multipart upload of an `s3` upload still arriving. One request at a time streams its
-- bytes: it holds the lease (a token and an end, renewed while bytes move; a tus HEAD takes
-- it over) and S3 part numbers it reserved, so no two requests ever write the same part
-- number, even one whose lease ended while its part was in flight.
CREATE TABLE tus_multiparts (
    upload_id    uuid PRIMARY KEY REFERENCES uploads (id) ON DELETE CASCADE,
    multipart_id text NOT NULL,
    part_bytes   bigint NOT NULL CHECK (part_bytes >= 5242880),
    next_part    int NOT NULL DEFAULT 1 CHECK (next_part BETWEEN 1 AND 10001),
    lease_token  uuid,
    lease_until  timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK ((lease_token IS NULL) = (lease_until IS NULL))
);

-- Parts landed, in file order: each `part_bytes` long but the last of the file.
CREATE TABLE tus_parts (
    upload_id    uuid NOT NULL REFERENCES tus_multiparts (upload_id) ON DELETE CASCADE,
    start_offset bigint NOT NULL CHECK (start_offset >= 0),
    part_number  int NOT NULL CHECK (part_number BETWEEN 1 AND 10000),
    size_bytes   bigint NOT NULL CHECK (size_bytes > 0),
    etag         text NOT NULL,
    PRIMARY KEY (upload_id, start_offset)
);

-- Bytes past the last whole part, each piece a small object of its own
-- (`tus-tail/{upload_id}/...`), until the next part takes them in.
CREATE TABLE tus_tail_pieces (
    upload_id    uuid NOT NULL REFERENCES tus_multiparts (upload_id) ON DELETE CASCADE,
    start_offset bigint NOT NULL CHECK (start_offset >= 0),
    size_bytes   bigint NOT NULL CHECK (size_bytes > 0),
    object_key   text NOT NULL UNIQUE,
    PRIMARY KEY (upload_id, start_offset)
);
