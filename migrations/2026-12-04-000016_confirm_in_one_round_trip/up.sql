-- A confirm alone goes to PostgreSQL in one round trip: BEGIN, the uploader's lock, the
-- contract's move to 'confirmed', the inserts and COMMIT, back to back. The move is a fence:
-- when it matches nothing (another confirm got there first, or the contract was closed or
-- deleted) it must fail on the server, so that the COMMIT already on the wire rolls the
-- inserts back, as vidq_claim_held does for a finalize. This one takes its message, so the
-- next fence needs no function of its own.
CREATE FUNCTION vidq_fence(matched bigint, failure text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF matched = 0 THEN
        RAISE EXCEPTION USING MESSAGE = failure;
    END IF;
    RETURN matched;
END
$$;
