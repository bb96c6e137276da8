DROP INDEX event_deliveries_resent_idx;
ALTER TABLE event_deliveries DROP COLUMN resent;
