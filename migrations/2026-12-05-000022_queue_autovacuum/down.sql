ALTER TABLE video_encoding_jobs RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor,
    autovacuum_vacuum_cost_limit, autovacuum_vacuum_cost_delay);
ALTER TABLE job_attempt_log RESET (autovacuum_vacuum_insert_scale_factor,
    autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_limit);
ALTER TABLE notification_outbox RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_limit, autovacuum_vacuum_cost_delay);
ALTER TABLE event_deliveries RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_limit, autovacuum_vacuum_cost_delay);
ALTER TABLE uploads RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor,
    autovacuum_vacuum_cost_limit);
ALTER TABLE recording_files RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor,
    autovacuum_vacuum_cost_limit);
ALTER TABLE video_artifacts RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor,
    autovacuum_vacuum_cost_limit);
