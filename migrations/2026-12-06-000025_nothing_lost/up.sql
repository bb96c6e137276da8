-- Objects a deletion still owes the bucket. The transaction that deletes a video (or a
-- user's videos) lists their objects here; the API deletes them at once and crosses them
-- off, and whatever S3 refused then (an outage) the sweeper deletes later. Deletion is
-- idempotent, so any sweeper may take any row.
CREATE TABLE doomed_objects (
    id bigserial PRIMARY KEY,
    -- One key, or every key under a prefix (ending in '/').
    key text NOT NULL,
    is_prefix boolean NOT NULL,
    tries integer NOT NULL DEFAULT 0,
    next_try_at timestamptz NOT NULL DEFAULT now(),
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (NOT is_prefix OR key LIKE '%/')
);
CREATE INDEX doomed_objects_due_idx ON doomed_objects (next_try_at);

-- Failed dashboard logins, per client address, shared by every API node: an address may
-- make five unsuccessful tries a minute. A try is a row from the moment it starts; a
-- successful login deletes its own.
CREATE TABLE login_tries (
    id bigserial PRIMARY KEY,
    address text NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX login_tries_address_idx ON login_tries (address, at);
CREATE INDEX login_tries_at_idx ON login_tries (at);

-- Live files that arrived whole but could not be recorded while the database stayed away
-- past VIDQ_LIVE_DB_PATIENCE_SECS; shown as segments.lost.
ALTER TABLE recordings ADD COLUMN lost_files integer NOT NULL DEFAULT 0 CHECK (lost_files >= 0);

-- A broadcast vidq cannot encode (no video track, or a video codec it cannot decode) is
-- refused at publish or at its init segment, and its recording fails at once.
ALTER TABLE recordings DROP CONSTRAINT recordings_end_reason_check;
ALTER TABLE recordings ADD CONSTRAINT recordings_end_reason_check
    CHECK (end_reason IN ('endlist', 'ended_by_client', 'idle', 'expired', 'no_video_stream'));
