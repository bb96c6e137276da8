-- The rules of the columns that every confirm, claim and finalize writes become domains.
--
-- PostgreSQL reads a table's CHECK constraints from their stored text, plans them and compiles
-- them again for every statement that inserts or updates the table, and checks all of them on
-- every row it writes, whatever columns changed: a finalize's video update paid for ten, a
-- claim's job update for five. In `perf`, that was 7% of the machine's CPU while 2 workers
-- drained no-op jobs (`vidq bench queue`). A domain's constraints are read and planned once per
-- session and checked only where a value is assigned to the column. The rules are the same and
-- the database still refuses the same rows; a column holds its domain's base type on the wire,
-- so clients see text, integer and bigint as before. The rules that tie several columns
-- together stay table CHECKs, one per table.
--
-- The domains start without constraints, so changing a column's type to one needs no rewrite
-- of the table and keeps its indexes; the constraints are added afterwards, which checks the
-- rows already there without rewriting them.
CREATE DOMAIN video_status AS text;
CREATE DOMAIN job_status AS text;
CREATE DOMAIN job_kind AS text;
CREATE DOMAIN upload_state AS text;
CREATE DOMAIN upload_via AS text;
CREATE DOMAIN event_type AS text;
-- The retry budget (invariant I6): a job's attempts so far, 0 to 3.
CREATE DOMAIN job_attempt_count AS integer;
-- An attempt's number, 1 to 3 (the one whose outputs a video plays).
CREATE DOMAIN attempt_number AS integer;
CREATE DOMAIN run_number AS integer;
CREATE DOMAIN pixels AS integer;
CREATE DOMAIN count_of AS integer;
CREATE DOMAIN milliseconds AS bigint;
CREATE DOMAIN byte_count AS bigint;
CREATE DOMAIN declared_bytes AS bigint;

-- The view reads the job's columns, so it goes while they change type and comes back as it was
-- (its definition is kept in a temporary table until then).
CREATE TEMPORARY TABLE kept_view ON COMMIT DROP AS
    SELECT pg_get_viewdef('job_attempts'::regclass) AS definition;
DROP VIEW job_attempts;

ALTER TABLE videos
    DROP CONSTRAINT videos_status_check,
    DROP CONSTRAINT videos_duration_ms_check,
    DROP CONSTRAINT videos_width_check,
    DROP CONSTRAINT videos_height_check,
    DROP CONSTRAINT videos_live_attempt_check,
    DROP CONSTRAINT videos_live_run_check,
    ALTER COLUMN status TYPE video_status,
    ALTER COLUMN duration_ms TYPE milliseconds,
    ALTER COLUMN width TYPE pixels,
    ALTER COLUMN height TYPE pixels,
    ALTER COLUMN live_attempt TYPE attempt_number,
    ALTER COLUMN live_run TYPE run_number;

ALTER TABLE video_encoding_jobs
    DROP CONSTRAINT video_encoding_jobs_status_check,
    DROP CONSTRAINT video_encoding_jobs_kind_check,
    DROP CONSTRAINT video_encoding_jobs_attempt_count_check,
    DROP CONSTRAINT video_encoding_jobs_run_check,
    ALTER COLUMN status TYPE job_status,
    ALTER COLUMN kind TYPE job_kind,
    ALTER COLUMN attempt_count TYPE job_attempt_count,
    ALTER COLUMN run TYPE run_number;

ALTER TABLE uploads
    DROP CONSTRAINT uploads_state_check,
    DROP CONSTRAINT uploads_via_check,
    DROP CONSTRAINT uploads_declared_size_check,
    DROP CONSTRAINT uploads_received_bytes_check,
    DROP CONSTRAINT uploads_tries_check,
    ALTER COLUMN state TYPE upload_state,
    ALTER COLUMN via TYPE upload_via,
    ALTER COLUMN declared_size TYPE declared_bytes,
    ALTER COLUMN received_bytes TYPE byte_count,
    ALTER COLUMN tries TYPE count_of;

ALTER TABLE notification_outbox
    DROP CONSTRAINT notification_outbox_event_type_check,
    ALTER COLUMN event_type TYPE event_type;

ALTER DOMAIN video_status ADD CONSTRAINT video_status_check
    CHECK (VALUE IN ('queued', 'processing', 'ready', 'failed'));
ALTER DOMAIN job_status ADD CONSTRAINT job_status_check
    CHECK (VALUE IN ('PENDING', 'PROCESSING', 'COMPLETED', 'DEAD'));
ALTER DOMAIN job_kind ADD CONSTRAINT job_kind_check
    CHECK (VALUE IN ('encode', 'repackage'));
ALTER DOMAIN upload_state ADD CONSTRAINT upload_state_check
    CHECK (VALUE IN ('receiving', 'pending', 'uploaded', 'confirmed', 'rejected', 'expired'));
ALTER DOMAIN upload_via ADD CONSTRAINT upload_via_check
    CHECK (VALUE IN ('presigned', 'vidq'));
ALTER DOMAIN event_type ADD CONSTRAINT event_type_check
    CHECK (VALUE IN ('video.accepted', 'video.ready', 'video.failed'));
ALTER DOMAIN job_attempt_count ADD CONSTRAINT job_attempt_count_check
    CHECK (VALUE BETWEEN 0 AND 3);
ALTER DOMAIN attempt_number ADD CONSTRAINT attempt_number_check
    CHECK (VALUE BETWEEN 1 AND 3);
ALTER DOMAIN run_number ADD CONSTRAINT run_number_check CHECK (VALUE >= 1);
ALTER DOMAIN pixels ADD CONSTRAINT pixels_check CHECK (VALUE > 0);
ALTER DOMAIN count_of ADD CONSTRAINT count_of_check CHECK (VALUE >= 0);
ALTER DOMAIN milliseconds ADD CONSTRAINT milliseconds_check CHECK (VALUE >= 0);
ALTER DOMAIN byte_count ADD CONSTRAINT byte_count_check CHECK (VALUE >= 0);
ALTER DOMAIN declared_bytes ADD CONSTRAINT declared_bytes_check CHECK (VALUE > 0);

-- The video's four rules across columns, as one CHECK: read and planned once per statement
-- instead of four times. Each part is one of the old constraints, and a row passes exactly
-- when each of them would have (a part that is NULL fails none, as before).
ALTER TABLE videos
    DROP CONSTRAINT videos_check,
    DROP CONSTRAINT videos_check1,
    DROP CONSTRAINT videos_failed_at_check,
    DROP CONSTRAINT videos_one_source,
    ADD CONSTRAINT videos_fields_follow_status CHECK (
        (status = 'ready') = (ready_at IS NOT NULL)
        AND (status = 'failed') = (error_code IS NOT NULL)
        AND (status = 'failed') = (failed_at IS NOT NULL)
        AND (upload_id IS NULL) <> (recording_id IS NULL));

DO $$ BEGIN
    EXECUTE 'CREATE VIEW job_attempts AS ' || (SELECT definition FROM kept_view);
END $$;
