CREATE INDEX notification_outbox_xid_idx ON notification_outbox (xid, id);
