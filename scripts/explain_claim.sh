#!/usr/bin/env bash
# Shows how PostgreSQL runs vidq's claim statement over a backlog of N pending jobs:
#   scripts/explain_claim.sh [N] [SERVER_URL]
# Creates a scratch database on the server (default postgres://localhost/postgres), applies
# vidq's migrations, loads N synthetic jobs, prints EXPLAIN (ANALYZE, BUFFERS) of the claim
# (rolled back, so nothing is claimed) and drops the database.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100000}"
server="${2:-postgres://localhost/postgres}"
db="vidq_explain_$$"
url="${server%/*}/$db"
psql "$server" -qc "CREATE DATABASE $db"
trap 'psql "$server" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)"' EXIT
DATABASE_URL="$url" cargo run -q --release -- migrate 2>/dev/null
psql "$url" -q -v ON_ERROR_STOP=1 <<SQL
INSERT INTO users (id, name, api_key_hash) VALUES (gen_random_uuid(), 'explain', sha256('explain'));
WITH rows AS (
  SELECT gen_random_uuid() AS upload_id, gen_random_uuid() AS video_id, n FROM generate_series(1, $n) n
), up AS (
  INSERT INTO uploads (id, owner_id, object_key, filename, content_type, declared_size, state, expires_at)
  SELECT upload_id, (SELECT id FROM users), 'originals/' || upload_id, 'x.mp4', 'video/mp4', 1, 'confirmed', now() FROM rows
), vid AS (
  INSERT INTO videos (id, owner_id, upload_id) SELECT video_id, (SELECT id FROM users), upload_id FROM rows
)
INSERT INTO video_encoding_jobs (video_id, original_s3_key, available_at)
SELECT video_id, 'originals/' || upload_id, now() - interval '1 hour' + n * interval '1 microsecond' FROM rows;
ANALYZE;
SQL
# The statement as the worker sends it, with its three parameters filled in.
claim=$(sed -n '/^pub const CLAIM_SQL: &str = "/,/";$/p' src/db/jobs/claim.rs | sed '1d; s/";$//' \
  | sed "s/\\\$1/gen_random_uuid()/; s/\\\$2/'explain'/g; s/\\\$3/60/")
psql "$url" -q -c "BEGIN" -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) $claim" -c "ROLLBACK"
