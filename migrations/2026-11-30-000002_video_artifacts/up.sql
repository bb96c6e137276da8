-- One row per output object of an encoding attempt, registered `pending` before its PUT and
-- moved to `uploaded` by a compare-and-set on state and size once S3 holds it. Each axis has
-- its own rows, so a confirmed MP4 never hides a missing segment, and a sweeper (not built
-- yet; until then a crashed attempt's rows stay pending) can re-drive exactly those objects.
CREATE TABLE video_artifacts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    video_id    uuid NOT NULL REFERENCES videos (id) ON DELETE CASCADE,
    attempt     integer NOT NULL CHECK (attempt BETWEEN 1 AND 3),
    axis        text NOT NULL CHECK (axis IN ('original', 'init', 'segment', 'playlist', 'thumbnail', 'mp4')),
    sequence    integer NOT NULL DEFAULT 0 CHECK (sequence >= 0),
    object_key  text NOT NULL UNIQUE,
    size_bytes  bigint NOT NULL CHECK (size_bytes >= 0),
    state       text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'uploaded')),
    created_at  timestamptz NOT NULL DEFAULT statement_timestamp(),
    uploaded_at timestamptz,
    UNIQUE (video_id, attempt, axis, sequence),
    CHECK ((state = 'uploaded') = (uploaded_at IS NOT NULL))
);
-- For the future sweeper's forward-moving cursor over what is still pending.
CREATE INDEX video_artifacts_pending_idx ON video_artifacts (id) WHERE state = 'pending';
