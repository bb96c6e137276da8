DROP INDEX event_deliveries_waiting_idx;
CREATE INDEX event_deliveries_waiting_idx ON event_deliveries (endpoint_id)
    WHERE status IN ('pending', 'sending');
