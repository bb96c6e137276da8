-- A delivery made by a resend (rather than by routing) is marked, so the per-endpoint resend
-- limit counts exactly those, through a small partial index.
ALTER TABLE event_deliveries ADD COLUMN resent boolean NOT NULL DEFAULT false;
CREATE INDEX event_deliveries_resent_idx ON event_deliveries (endpoint_id, created_at) WHERE resent;
