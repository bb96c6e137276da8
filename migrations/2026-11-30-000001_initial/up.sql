-- vidq's schema: uploaders, upload contracts, videos, their encoding jobs and attempts,
-- and the notification outbox. Every state column is text with a CHECK so that a state the
-- code does not know can never be written, by the code or by an operator's psql session.
-- All timestamps are timestamptz and every lease or availability comparison uses the
-- database clock (statement_timestamp()), never a node's clock.

CREATE TABLE users (
    id           uuid PRIMARY KEY,
    name         text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    -- SHA-256 of the API key; the key itself is shown once and never stored.
    api_key_hash bytea NOT NULL UNIQUE CHECK (length(api_key_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT statement_timestamp()
);

CREATE TABLE uploads (
    id            uuid PRIMARY KEY,
    owner_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- Chosen by the server (originals/{id}); the client's filename is kept only as a label.
    object_key    text NOT NULL UNIQUE,
    filename      text NOT NULL,
    content_type  text NOT NULL,
    declared_size bigint NOT NULL CHECK (declared_size > 0),
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'uploaded', 'confirmed', 'rejected', 'expired')),
    reject_reason text,
    expires_at    timestamptz NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE INDEX uploads_owner_idx ON uploads (owner_id);
-- For the future upload sweeper, which will walk pending contracts with a forward cursor.
CREATE INDEX uploads_pending_idx ON uploads (id) WHERE state = 'pending';

CREATE TABLE videos (
    id            uuid PRIMARY KEY,
    owner_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- Deleting the upload contract deletes the video made from it (and its job).
    upload_id     uuid NOT NULL UNIQUE REFERENCES uploads (id) ON DELETE CASCADE,
    status        text NOT NULL DEFAULT 'queued'
                  CHECK (status IN ('queued', 'processing', 'ready', 'failed')),
    duration_ms   bigint CHECK (duration_ms >= 0),
    width         integer CHECK (width > 0),
    height        integer CHECK (height > 0),
    video_codec   text,
    audio_codec   text,
    -- Which attempt's prefix (videos/{id}/a{n}/) holds the playable outputs.
    live_attempt  integer CHECK (live_attempt BETWEEN 1 AND 3),
    hls_key       text,
    mp4_key       text,
    thumbnail_key text,
    error_code    text,
    error_message text,
    created_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    ready_at      timestamptz,
    CHECK ((status = 'ready') = (ready_at IS NOT NULL)),
    CHECK ((status = 'failed') = (error_code IS NOT NULL))
);
-- Newest-first listing per owner; ids are UUIDv7, so id order is creation order.
CREATE INDEX videos_owner_id_idx ON videos (owner_id, id DESC);

CREATE TABLE video_encoding_jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    video_id        uuid NOT NULL UNIQUE REFERENCES videos (id) ON DELETE CASCADE,
    original_s3_key text NOT NULL,
    status          text NOT NULL DEFAULT 'PENDING'
                    CHECK (status IN ('PENDING', 'PROCESSING', 'COMPLETED', 'DEAD')),
    -- The retry budget is enforced here as well as in code (invariant I6).
    attempt_count   integer NOT NULL DEFAULT 0 CHECK (attempt_count BETWEEN 0 AND 3),
    claim_token     uuid,
    claimed_by      text,
    lease_until     timestamptz,
    available_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    enqueued_at     timestamptz NOT NULL DEFAULT statement_timestamp(),
    completed_at    timestamptz,
    last_error      text,
    -- A PROCESSING job always carries the claim that fences its results.
    CHECK (status <> 'PROCESSING' OR (claim_token IS NOT NULL AND lease_until IS NOT NULL))
);
-- The one claim index: both claimable states, in claim order. With it the claim statement is
-- an Index Scan that stops at the first claimable row, whatever the backlog; two partial
-- indexes (one per state) make the planner scan and sort the whole backlog instead.
CREATE INDEX video_encoding_jobs_claimable_idx
    ON video_encoding_jobs (available_at, id)
    WHERE status IN ('PENDING', 'PROCESSING');

CREATE TABLE job_attempts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint NOT NULL REFERENCES video_encoding_jobs (id) ON DELETE CASCADE,
    attempt       integer NOT NULL CHECK (attempt BETWEEN 1 AND 3),
    claim_token   uuid NOT NULL UNIQUE,
    node_id       text NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT statement_timestamp(),
    ended_at      timestamptz,
    outcome       text CHECK (outcome IN ('completed', 'failed', 'retry', 'lost', 'released', 'dead')),
    error_code    text,
    error_message text
);
CREATE INDEX job_attempts_job_idx ON job_attempts (job_id, attempt);

CREATE TABLE notification_outbox (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Minted in the producing transaction; the same id goes out on every delivery try.
    event_id   uuid NOT NULL UNIQUE,
    event_type text NOT NULL CHECK (event_type IN ('video.accepted', 'video.ready', 'video.failed')),
    owner_id   uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- No foreign key: an event stays true history after its video is deleted.
    video_id   uuid NOT NULL,
    payload    jsonb NOT NULL,
    -- The inserting transaction. Feeds page by it and serve only rows below the oldest
    -- running transaction, so a row whose transaction commits late is never skipped.
    xid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    created_at timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE INDEX notification_outbox_owner_xid_idx ON notification_outbox (owner_id, xid, id);
CREATE INDEX notification_outbox_xid_idx ON notification_outbox (xid, id);
