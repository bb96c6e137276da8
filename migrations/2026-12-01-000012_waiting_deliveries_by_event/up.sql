-- Each endpoint's waiting deliveries, now keyed by event too. Routing asks, for every event
-- of its batch, whether that (event, endpoint) pair already waits (a resend before routing).
-- PostgreSQL may answer that through this index rather than the outbox one (a generic plan
-- did, as soon as the table's statistics were old), and keyed by endpoint alone that probe
-- read every waiting delivery of the endpoint: the longer a receiver was down, the slower
-- each new event was routed, when the relay most needs to catch up. With the event in the
-- key, either index answers the probe with one lookup.
DROP INDEX event_deliveries_waiting_idx;
CREATE INDEX event_deliveries_waiting_idx ON event_deliveries (endpoint_id, outbox_id)
    WHERE status IN ('pending', 'sending');
