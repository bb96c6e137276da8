-- No statement reads the outbox by `(xid, id)` across owners: the pull feed pages one owner's
-- events (`notification_outbox_owner_xid_idx`), the relay reads unrouted rows by id and the
-- prune by id. The index still cost every event an entry at its insert, and another when the
-- relay stamps `routed_at` (that update cannot be done in place: `routed_at` is in the
-- unrouted index's predicate).
DROP INDEX notification_outbox_xid_idx;
