-- The operator surface: who may open the dashboard, its login sessions, and what each
-- running process says about itself (the dashboard's node list and the sweeper's breaker).

-- An operator is a user whose API key also opens /admin (`vidq user create --admin`).
ALTER TABLE users ADD COLUMN is_admin BOOLEAN NOT NULL DEFAULT false;

-- Whether any operator exists is asked on every /admin request while no token is set.
CREATE INDEX users_admin_idx ON users (id) WHERE is_admin;

-- A dashboard login. The cookie carries a random token; only its SHA-256 is stored, so a
-- database dump opens no session. `csrf` is echoed by every form the dashboard renders.
-- `credential_hash` is the SHA-256 of the secret that logged in: a session lives only while
-- that secret still opens the dashboard (the same operator token, or an operator's key not
-- revoked or demoted since).
CREATE TABLE admin_sessions (
    token_hash BYTEA PRIMARY KEY,
    credential_hash BYTEA NOT NULL,
    subject TEXT NOT NULL,
    csrf TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX admin_sessions_expires_idx ON admin_sessions (expires_at);

-- One row per running process and role, upserted every few seconds by the process itself.
-- `detail` is what the role knows that the tables do not (a worker's running attempts, a
-- sweeper's breaker). Rows of processes that stopped are kept: their age tells the story.
CREATE TABLE nodes (
    role TEXT NOT NULL CHECK (role IN ('api', 'worker', 'relay', 'sweeper')),
    node_id TEXT NOT NULL,
    slots INTEGER NOT NULL DEFAULT 0,
    started_at TIMESTAMPTZ NOT NULL,
    seen_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    detail JSONB NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (role, node_id)
);

-- What the dashboard and /metrics read on every refresh, without walking all history: DEAD
-- jobs, jobs finished in the last hour (and their videos' time to READY), failed videos.
-- The completed index costs each finalize one index entry; the other two only take rows
-- that failed.
CREATE INDEX video_encoding_jobs_dead_idx ON video_encoding_jobs (id) WHERE status = 'DEAD';
CREATE INDEX video_encoding_jobs_completed_idx ON video_encoding_jobs (completed_at)
    WHERE status = 'COMPLETED';
CREATE INDEX videos_failed_idx ON videos (updated_at) WHERE status = 'failed';
-- Running attempts by node (the nodes panel, the PROCESSING count) without walking the
-- PENDING backlog the claim index also holds.
CREATE INDEX video_encoding_jobs_processing_idx ON video_encoding_jobs (claimed_by)
    WHERE status = 'PROCESSING';
-- Each endpoint's waiting deliveries, and the ones given up (rare), without its history.
CREATE INDEX event_deliveries_waiting_idx ON event_deliveries (endpoint_id)
    WHERE status IN ('pending', 'sending');
CREATE INDEX event_deliveries_given_up_idx ON event_deliveries (endpoint_id, created_at)
    WHERE status IN ('exhausted', 'discarded');
-- Recordings not finished, newest first (`recordings_open_idx` leaves out `waiting`).
CREATE INDEX recordings_unfinished_idx ON recordings (created_at)
    WHERE state IN ('waiting', 'live', 'ending', 'ended');
