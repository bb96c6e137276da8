-- The queue and the ledgers are small tables with a high turnover: every job is inserted,
-- claimed, renewed and completed, every event delivered, every upload moved through its
-- states. The claim walks the claimable index, and until VACUUM runs it walks the entries
-- of jobs already claimed and completed too. PostgreSQL's defaults vacuum a table once a
-- fifth of it is dead and throttle the work to a trickle (cost limit 200), which on a queue
-- of a million rows means hundreds of thousands of dead entries between vacuums. These
-- tables are vacuumed after 1% of them (plus 1,000 rows) changed, without the throttle's
-- long pauses, and analyzed as often, so the claim's plan and walk stay those of a short
-- queue however long the system runs (README, "Benchmarks": `vidq bench queue --sustained`).
ALTER TABLE video_encoding_jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000,
    autovacuum_vacuum_cost_delay = 1
);
ALTER TABLE job_attempt_log SET (
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);
ALTER TABLE notification_outbox SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000,
    autovacuum_vacuum_cost_delay = 1
);
ALTER TABLE event_deliveries SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000,
    autovacuum_vacuum_cost_delay = 1
);
ALTER TABLE uploads SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);
ALTER TABLE recording_files SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);
ALTER TABLE video_artifacts SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);
