CREATE TEMPORARY TABLE kept_view ON COMMIT DROP AS
    SELECT pg_get_viewdef('job_attempts'::regclass) AS definition;
DROP VIEW job_attempts;

ALTER TABLE videos
    DROP CONSTRAINT videos_fields_follow_status,
    ALTER COLUMN status TYPE text,
    ALTER COLUMN duration_ms TYPE bigint,
    ALTER COLUMN width TYPE integer,
    ALTER COLUMN height TYPE integer,
    ALTER COLUMN live_attempt TYPE integer,
    ALTER COLUMN live_run TYPE integer,
    ADD CONSTRAINT videos_status_check CHECK (status IN ('queued', 'processing', 'ready', 'failed')),
    ADD CONSTRAINT videos_duration_ms_check CHECK (duration_ms >= 0),
    ADD CONSTRAINT videos_width_check CHECK (width > 0),
    ADD CONSTRAINT videos_height_check CHECK (height > 0),
    ADD CONSTRAINT videos_live_attempt_check CHECK (live_attempt BETWEEN 1 AND 3),
    ADD CONSTRAINT videos_live_run_check CHECK (live_run >= 1),
    ADD CONSTRAINT videos_check CHECK ((status = 'ready') = (ready_at IS NOT NULL)),
    ADD CONSTRAINT videos_check1 CHECK ((status = 'failed') = (error_code IS NOT NULL)),
    ADD CONSTRAINT videos_failed_at_check CHECK ((status = 'failed') = (failed_at IS NOT NULL)),
    ADD CONSTRAINT videos_one_source CHECK ((upload_id IS NULL) <> (recording_id IS NULL));

ALTER TABLE video_encoding_jobs
    ALTER COLUMN status TYPE text,
    ALTER COLUMN kind TYPE text,
    ALTER COLUMN attempt_count TYPE integer,
    ALTER COLUMN run TYPE integer,
    ADD CONSTRAINT video_encoding_jobs_status_check
        CHECK (status IN ('PENDING', 'PROCESSING', 'COMPLETED', 'DEAD')),
    ADD CONSTRAINT video_encoding_jobs_kind_check CHECK (kind IN ('encode', 'repackage')),
    ADD CONSTRAINT video_encoding_jobs_attempt_count_check CHECK (attempt_count BETWEEN 0 AND 3),
    ADD CONSTRAINT video_encoding_jobs_run_check CHECK (run >= 1);

ALTER TABLE uploads
    ALTER COLUMN state TYPE text,
    ALTER COLUMN via TYPE text,
    ALTER COLUMN declared_size TYPE bigint,
    ALTER COLUMN received_bytes TYPE bigint,
    ALTER COLUMN tries TYPE integer,
    ADD CONSTRAINT uploads_state_check
        CHECK (state IN ('receiving', 'pending', 'uploaded', 'confirmed', 'rejected', 'expired')),
    ADD CONSTRAINT uploads_via_check CHECK (via IN ('presigned', 'vidq')),
    ADD CONSTRAINT uploads_declared_size_check CHECK (declared_size > 0),
    ADD CONSTRAINT uploads_received_bytes_check CHECK (received_bytes >= 0),
    ADD CONSTRAINT uploads_tries_check CHECK (tries >= 0);

ALTER TABLE notification_outbox
    ALTER COLUMN event_type TYPE text,
    ADD CONSTRAINT notification_outbox_event_type_check
        CHECK (event_type IN ('video.accepted', 'video.ready', 'video.failed'));

DROP DOMAIN video_status, job_status, job_kind, upload_state, upload_via, event_type,
    job_attempt_count, attempt_number, run_number, pixels, count_of, milliseconds, byte_count,
    declared_bytes;

DO $$ BEGIN
    EXECUTE 'CREATE VIEW job_attempts AS ' || (SELECT definition FROM kept_view);
END $$;
