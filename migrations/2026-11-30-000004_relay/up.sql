-- Webhook endpoints: where an uploader wants its events POSTed, and the secret that signs them.
CREATE TABLE webhook_endpoints (
    id                         uuid PRIMARY KEY,
    owner_id                   uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    url                        text NOT NULL,
    -- NULL: every event type.
    event_types                text[] CHECK (
        event_types IS NULL
        OR event_types <@ ARRAY['video.accepted', 'video.ready', 'video.failed']::text[]),
    secret                     text NOT NULL,
    -- During a rotation the old secret signs too, until it expires.
    previous_secret            text,
    previous_secret_expires_at timestamptz,
    -- Set when the receiver answered 410 Gone: nothing more is sent to it.
    disabled_at                timestamptz,
    disabled_reason            text,
    created_at                 timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE INDEX webhook_endpoints_owner_idx ON webhook_endpoints (owner_id, id);

-- Routing: a relay turns each outbox row into one delivery per matching sink, exactly once,
-- by claiming unrouted rows with SKIP LOCKED and stamping them in the same statement.
ALTER TABLE notification_outbox ADD COLUMN routed_at timestamptz;
-- Events from before relays existed had no destinations: do not send history now.
UPDATE notification_outbox SET routed_at = created_at;
CREATE INDEX notification_outbox_unrouted_idx ON notification_outbox (id) WHERE routed_at IS NULL;

-- One row per (event, destination): the relay's own queue, claimed like jobs.
CREATE TABLE event_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id       bigint NOT NULL REFERENCES notification_outbox (id) ON DELETE CASCADE,
    sink            text NOT NULL CHECK (sink IN ('webhook', 'nats')),
    endpoint_id     uuid REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sending', 'delivered', 'exhausted', 'discarded')),
    -- Tries started, counted at claim time so a relay that dies mid-send still uses one up.
    attempt_count   integer NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    -- pending: when the next try is due; sending: when the claim's lease runs out.
    next_attempt_at timestamptz NOT NULL DEFAULT statement_timestamp(),
    claim_token     uuid,
    claimed_by      text,
    last_error      text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    CHECK ((sink = 'webhook') = (endpoint_id IS NOT NULL))
);
-- The one index the claim walks: due rows in order, whether waiting or with a lapsed lease.
CREATE INDEX event_deliveries_due_idx ON event_deliveries (next_attempt_at, id)
    WHERE status IN ('pending', 'sending');
CREATE INDEX event_deliveries_outbox_idx ON event_deliveries (outbox_id);
CREATE INDEX event_deliveries_endpoint_idx ON event_deliveries (endpoint_id, id);

-- Every finished try of a delivery: the attempt log an uploader reads when a receiver fails.
CREATE TABLE delivery_attempts (
    delivery_id     bigint NOT NULL REFERENCES event_deliveries (id) ON DELETE CASCADE,
    attempt         integer NOT NULL,
    relay_id        text NOT NULL,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz NOT NULL,
    response_status integer,
    error           text,
    PRIMARY KEY (delivery_id, attempt)
);
