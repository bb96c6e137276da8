DROP TABLE delivery_attempts;
DROP TABLE event_deliveries;
DROP INDEX notification_outbox_unrouted_idx;
ALTER TABLE notification_outbox DROP COLUMN routed_at;
DROP TABLE webhook_endpoints;
