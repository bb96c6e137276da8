-- A fenced write that matched nothing fails on the server, so it fails the whole
-- transaction there. A finalize whose last statements go to PostgreSQL in one pipeline with
-- the COMMIT (the client reads the answers afterwards) is then rolled back by the server:
-- PostgreSQL turns the COMMIT of a failed transaction into a ROLLBACK. The client cannot
-- check a row count before its COMMIT is already on the wire.
CREATE FUNCTION vidq_claim_held(matched bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF matched = 0 THEN
        RAISE EXCEPTION 'vidq: the claim was lost';
    END IF;
    RETURN matched;
END
$$;
