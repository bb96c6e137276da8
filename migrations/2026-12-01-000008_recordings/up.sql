-- Live recordings (docs/live.md): a broadcast's files arrive over time as HTTP
-- PUTs of HLS with fMP4 segments. Each file is spooled on the node that took it and gets a
-- row in `recording_files`, the ledger of its axis (init or one segment), uploaded by that
-- node's sweeper with the same claim, backoff and CAS as an upload through vidq.
CREATE TABLE recordings (
    id              uuid PRIMARY KEY,
    owner_id        uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- SHA-256 of the secret stream key in the ingest URL; the key is shown once.
    stream_key_hash bytea NOT NULL UNIQUE CHECK (length(stream_key_hash) = 32),
    state           text NOT NULL DEFAULT 'waiting'
                    CHECK (state IN ('waiting', 'live', 'ending', 'ended', 'ready', 'failed')),
    -- The node whose spool holds the recording's files (its sweeper uploads them).
    node_id         text NOT NULL,
    -- Why and when it ended; files arriving after `cutoff_at` are excluded.
    end_reason      text CHECK (end_reason IN ('endlist', 'ended_by_client', 'idle')),
    ended_at        timestamptz,
    cutoff_at       timestamptz,
    -- The last segment the final playlist names: later numbers are excluded.
    final_sequence  integer CHECK (final_sequence >= 0),
    last_ingest_at  timestamptz,
    -- Segment durations (ms) by number, as the encoder's playlists gave them: a playlist
    -- may name a segment before that segment's own PUT has been registered.
    playlist_durations jsonb NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL))
);
CREATE INDEX recordings_owner_idx ON recordings (owner_id, id DESC);

CREATE TABLE recording_files (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recording_id  uuid NOT NULL REFERENCES recordings (id) ON DELETE CASCADE,
    axis          text NOT NULL CHECK (axis IN ('init', 'segment')),
    -- The segment's number in the stream (0 for init).
    sequence      integer NOT NULL CHECK (sequence >= 0),
    -- From the playlist's #EXTINF once it names the segment.
    duration_ms   integer CHECK (duration_ms >= 0),
    object_key    text NOT NULL UNIQUE,
    size_bytes    bigint NOT NULL CHECK (size_bytes >= 0),
    -- Relative to the node's VIDQ_SPOOL_DIR.
    spool_path    text NOT NULL,
    node_id       text NOT NULL,
    -- pending: on the spool, owed to S3; uploaded: S3 holds it with this size (CAS);
    -- excluded: after the cutoff, never PUT; rejected: refused at the file boundary.
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'uploaded', 'excluded', 'rejected')),
    reject_reason text,
    tries         integer NOT NULL DEFAULT 0 CHECK (tries >= 0),
    next_try_at   timestamptz,
    last_error    text,
    claimed_until timestamptz,
    received_at   timestamptz NOT NULL DEFAULT statement_timestamp(),
    uploaded_at   timestamptz,
    UNIQUE (recording_id, axis, sequence),
    CHECK ((state = 'uploaded') = (uploaded_at IS NOT NULL))
);
-- The sweeper's forward cursor over what its node still owes S3.
CREATE INDEX recording_files_pending_idx ON recording_files (id) WHERE state = 'pending';
