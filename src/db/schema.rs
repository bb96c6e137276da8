// @generated automatically by Diesel CLI.

pub mod sql_types {
    #[derive(diesel::query_builder::QueryId, Clone, diesel::sql_types::SqlType)]
    #[diesel(postgres_type(name = "xid8", schema = "pg_catalog"))]
    pub struct Xid8;
}

diesel::table! {
    admin_sessions (token_hash) {
        token_hash -> Bytea,
        credential_hash -> Bytea,
        subject -> Text,
        csrf -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
    }
}

diesel::table! {
    delivery_attempts (delivery_id, attempt) {
        delivery_id -> Int8,
        attempt -> Int4,
        relay_id -> Text,
        started_at -> Timestamptz,
        finished_at -> Timestamptz,
        response_status -> Nullable<Int4>,
        error -> Nullable<Text>,
    }
}

diesel::table! {
    event_deliveries (id) {
        id -> Int8,
        outbox_id -> Int8,
        sink -> Text,
        endpoint_id -> Nullable<Uuid>,
        status -> Text,
        attempt_count -> Int4,
        next_attempt_at -> Timestamptz,
        claim_token -> Nullable<Uuid>,
        claimed_by -> Nullable<Text>,
        last_error -> Nullable<Text>,
        delivered_at -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
        resent -> Bool,
    }
}

diesel::table! {
    job_attempt_log (id) {
        id -> Int8,
        job_id -> Int8,
        attempt -> Int4,
        claim_token -> Uuid,
        node_id -> Text,
        started_at -> Timestamptz,
        ended_at -> Timestamptz,
        outcome -> Text,
        error_code -> Nullable<Text>,
        error_message -> Nullable<Text>,
        run -> Int4,
    }
}

diesel::table! {
    nodes (role, node_id) {
        role -> Text,
        node_id -> Text,
        slots -> Int4,
        started_at -> Timestamptz,
        seen_at -> Timestamptz,
        detail -> Jsonb,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use super::sql_types::Xid8;

    notification_outbox (id) {
        id -> Int8,
        event_id -> Uuid,
        event_type -> Text,
        owner_id -> Uuid,
        video_id -> Uuid,
        payload -> Jsonb,
        xid -> Xid8,
        created_at -> Timestamptz,
        routed_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    recording_files (id) {
        id -> Int8,
        recording_id -> Uuid,
        axis -> Text,
        sequence -> Int4,
        duration_ms -> Nullable<Int4>,
        object_key -> Text,
        size_bytes -> Int8,
        spool_path -> Text,
        node_id -> Text,
        state -> Text,
        reject_reason -> Nullable<Text>,
        tries -> Int4,
        next_try_at -> Nullable<Timestamptz>,
        last_error -> Nullable<Text>,
        claimed_until -> Nullable<Timestamptz>,
        received_at -> Timestamptz,
        uploaded_at -> Nullable<Timestamptz>,
        content_sha256 -> Nullable<Text>,
    }
}

diesel::table! {
    recordings (id) {
        id -> Uuid,
        owner_id -> Uuid,
        stream_key_hash -> Bytea,
        state -> Text,
        node_id -> Text,
        end_reason -> Nullable<Text>,
        ended_at -> Nullable<Timestamptz>,
        cutoff_at -> Nullable<Timestamptz>,
        final_sequence -> Nullable<Int4>,
        last_ingest_at -> Nullable<Timestamptz>,
        playlist_durations -> Jsonb,
        first_sequence -> Nullable<Int4>,
        target_duration_secs -> Nullable<Int4>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        lost_files -> Int4,
    }
}

diesel::table! {
    tus_multiparts (upload_id) {
        upload_id -> Uuid,
        multipart_id -> Text,
        part_bytes -> Int8,
        next_part -> Int4,
        lease_token -> Nullable<Uuid>,
        lease_until -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    tus_parts (upload_id, start_offset) {
        upload_id -> Uuid,
        start_offset -> Int8,
        part_number -> Int4,
        size_bytes -> Int8,
        etag -> Text,
    }
}

diesel::table! {
    tus_tail_pieces (upload_id, start_offset) {
        upload_id -> Uuid,
        start_offset -> Int8,
        size_bytes -> Int8,
        object_key -> Text,
    }
}

diesel::table! {
    uploads (id) {
        id -> Uuid,
        owner_id -> Uuid,
        object_key -> Text,
        filename -> Text,
        content_type -> Text,
        declared_size -> Int8,
        state -> Text,
        reject_reason -> Nullable<Text>,
        expires_at -> Timestamptz,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        via -> Text,
        received_bytes -> Int8,
        spool_path -> Nullable<Text>,
        node_id -> Nullable<Text>,
        checksum -> Nullable<Text>,
        tries -> Int4,
        next_try_at -> Nullable<Timestamptz>,
        last_error -> Nullable<Text>,
        claimed_until -> Nullable<Timestamptz>,
        store -> Nullable<Text>,
        tus_metadata -> Nullable<Text>,
    }
}

diesel::table! {
    users (id) {
        id -> Uuid,
        name -> Text,
        api_key_hash -> Bytea,
        created_at -> Timestamptz,
        is_admin -> Bool,
    }
}

diesel::table! {
    video_artifacts (id) {
        id -> Int8,
        video_id -> Uuid,
        attempt -> Int4,
        axis -> Text,
        sequence -> Int4,
        object_key -> Text,
        size_bytes -> Int8,
        state -> Text,
        created_at -> Timestamptz,
        uploaded_at -> Nullable<Timestamptz>,
        run -> Int4,
        part -> Nullable<Int4>,
    }
}

diesel::table! {
    video_encoding_jobs (id) {
        id -> Int8,
        video_id -> Uuid,
        original_s3_key -> Text,
        status -> Text,
        attempt_count -> Int4,
        claim_token -> Nullable<Uuid>,
        claimed_by -> Nullable<Text>,
        lease_until -> Nullable<Timestamptz>,
        available_at -> Timestamptz,
        enqueued_at -> Timestamptz,
        completed_at -> Nullable<Timestamptz>,
        last_error -> Nullable<Text>,
        run -> Int4,
        kind -> Text,
        claimed_at -> Nullable<Timestamptz>,
        parent_id -> Nullable<Int8>,
        part -> Nullable<Int4>,
        plan -> Nullable<Jsonb>,
        whole -> Bool,
    }
}

diesel::table! {
    videos (id) {
        id -> Uuid,
        owner_id -> Uuid,
        upload_id -> Nullable<Uuid>,
        status -> Text,
        duration_ms -> Nullable<Int8>,
        width -> Nullable<Int4>,
        height -> Nullable<Int4>,
        video_codec -> Nullable<Text>,
        audio_codec -> Nullable<Text>,
        live_attempt -> Nullable<Int4>,
        hls_key -> Nullable<Text>,
        mp4_key -> Nullable<Text>,
        thumbnail_key -> Nullable<Text>,
        error_code -> Nullable<Text>,
        error_message -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        ready_at -> Nullable<Timestamptz>,
        live_run -> Nullable<Int4>,
        recording_id -> Nullable<Uuid>,
        failed_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    webhook_endpoints (id) {
        id -> Uuid,
        owner_id -> Uuid,
        url -> Text,
        event_types -> Nullable<Array<Nullable<Text>>>,
        secret -> Text,
        previous_secret -> Nullable<Text>,
        previous_secret_expires_at -> Nullable<Timestamptz>,
        disabled_at -> Nullable<Timestamptz>,
        disabled_reason -> Nullable<Text>,
        created_at -> Timestamptz,
    }
}

diesel::joinable!(delivery_attempts -> event_deliveries (delivery_id));
diesel::joinable!(event_deliveries -> notification_outbox (outbox_id));
diesel::joinable!(event_deliveries -> webhook_endpoints (endpoint_id));
diesel::joinable!(job_attempt_log -> video_encoding_jobs (job_id));
diesel::joinable!(notification_outbox -> users (owner_id));
diesel::joinable!(recording_files -> recordings (recording_id));
diesel::joinable!(recordings -> users (owner_id));
diesel::joinable!(uploads -> users (owner_id));
diesel::joinable!(video_artifacts -> videos (video_id));
diesel::joinable!(video_encoding_jobs -> videos (video_id));
diesel::joinable!(videos -> recordings (recording_id));
diesel::joinable!(videos -> uploads (upload_id));
diesel::joinable!(videos -> users (owner_id));
diesel::joinable!(webhook_endpoints -> users (owner_id));

diesel::allow_tables_to_appear_in_same_query!(
    admin_sessions,
    delivery_attempts,
    event_deliveries,
    job_attempt_log,
    nodes,
    notification_outbox,
    recording_files,
    recordings,
    uploads,
    users,
    video_artifacts,
    video_encoding_jobs,
    videos,
    webhook_endpoints,
);
