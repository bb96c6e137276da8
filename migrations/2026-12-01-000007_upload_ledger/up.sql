-- The upload ledger (docs/architecture.md, "Upload recovery"): an upload that comes through vidq (tus or
-- a single PUT) lands on a node's spool first; its row is the durable record of what that
-- node still owes S3. The sweeper of that node re-drives it until it is confirmed or
-- rejected; the in-memory queue in front of its workers is a throttle, never the ledger.
ALTER TABLE uploads
    -- How the bytes reach S3: the client PUTs a presigned URL, or vidq PUTs from its spool.
    ADD COLUMN via            text NOT NULL DEFAULT 'presigned' CHECK (via IN ('presigned', 'vidq')),
    -- Bytes vidq has received and fsynced into the spool file so far (resumable uploads).
    ADD COLUMN received_bytes bigint NOT NULL DEFAULT 0 CHECK (received_bytes >= 0),
    -- The spool file, relative to VIDQ_SPOOL_DIR (never absolute: the sweeper refuses
    -- anything that resolves outside the root).
    ADD COLUMN spool_path     text,
    -- The node whose spool holds the file; only that node's sweeper re-drives the row.
    ADD COLUMN node_id        text,
    -- The client's checksum, e.g. 'sha256:<hex>', if it gave one.
    ADD COLUMN checksum       text,
    -- Failed PUT tries, and when the next one may start (exponential backoff with jitter,
    -- computed by the sweeper, stored here so a restart keeps it).
    ADD COLUMN tries          integer NOT NULL DEFAULT 0 CHECK (tries >= 0),
    ADD COLUMN next_try_at    timestamptz,
    ADD COLUMN last_error     text,
    -- A sweeper's lease on the row while one of its workers PUTs it: two sweepers never
    -- PUT one row at once, and a sweeper that dies loses the row when the lease ends.
    ADD COLUMN claimed_until  timestamptz,
    -- A row vidq PUTs must say where its bytes are.
    ADD CONSTRAINT uploads_vidq_has_spool
        CHECK (via <> 'vidq' OR (spool_path IS NOT NULL AND node_id IS NOT NULL));

ALTER TABLE uploads DROP CONSTRAINT uploads_state_check;
-- 'receiving': an upload through vidq whose bytes are still arriving.
ALTER TABLE uploads ADD CONSTRAINT uploads_state_check
    CHECK (state IN ('receiving', 'pending', 'uploaded', 'confirmed', 'rejected', 'expired'));
