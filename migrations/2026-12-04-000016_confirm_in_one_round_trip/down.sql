DROP FUNCTION vidq_fence(bigint, text);
