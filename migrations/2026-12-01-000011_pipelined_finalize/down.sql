DROP FUNCTION vidq_claim_held(bigint);
