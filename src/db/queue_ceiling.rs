//! The queue's SQL-only ceiling: the claim and the READY finalize as pgbench scripts, sent the
//! way a busy worker sends them, with no Rust, no pool and no job body in the way.
//! `vidq bench queue` runs them beside the real workers; what the workers reach against them
//! is the cost of everything that is not SQL.
//!
//! Each script is one pgbench transaction per finalize commit and one pipelined round trip:
//! the finalize of the jobs the client holds (`BEGIN`, the uploaders' lock, the videos set
//! READY, their `video.ready` events, the workers' own fenced completion, `COMMIT`) and
//! behind it the claim of the next ones, as a worker sends its next claim behind its
//! `COMMIT`. The finalize's statements are those of a batch (`= ANY`, `unnest`) in both
//! scripts, a batch of one in the first. The claim is the
//! worker's own statement ([`super::jobs::CLAIM_SQL`], [`super::jobs::claim_some_sql`]) with
//! its parameters written in; it hands what it claimed to the finalize that follows through
//! session settings (`vidq_bench.*`), because pgbench cannot read an answer inside a
//! pipeline. A client's first transaction claims on its own first (pgbench runs the scripts
//! with `-D holding=0`, [`HOLDING`]).

/// The pgbench variable the scripts expect, and its first value: no claim held yet.
pub const HOLDING: (&str, &str) = ("holding", "0");

/// Where the claim leaves what the finalize needs, as `set_config` calls over `claimed`.
const HAND_OVER_ONE: &str = "SELECT set_config('vidq_bench.jobs', ARRAY[id]::text, false),
       set_config('vidq_bench.tokens', ARRAY[claim_token]::text, false),
       set_config('vidq_bench.videos', ARRAY[video_id]::text, false)
  FROM claimed";

/// [`HAND_OVER_ONE`] for a claim of several jobs, in id order (the order of their tokens).
const HAND_OVER_SOME: &str =
    "SELECT set_config('vidq_bench.jobs', array_agg(id ORDER BY id)::text, false),
       set_config('vidq_bench.tokens', array_agg(claim_token ORDER BY id)::text, false),
       set_config('vidq_bench.videos', array_agg(video_id ORDER BY id)::text, false)
  FROM claimed";

/// The claim's own last line, which the hand-over replaces.
const CLAIM_ANSWER: &str = "SELECT id, video_id, original_s3_key, kind, claim_token, attempt_count, run, queued_secs, parent_id, part\n  FROM claimed";

/// One job per transaction: what a worker with one slot sends.
pub fn one_job_per_transaction() -> String {
    let claim = super::jobs::CLAIM_SQL
        .replace("$1", "gen_random_uuid()")
        .replace(CLAIM_ANSWER, HAND_OVER_ONE);
    script(&with_parameters(&claim))
}

/// `batch` jobs per transaction: claimed in one statement, finalized in one commit.
pub fn batched(batch: usize) -> String {
    let tokens = format!("ARRAY(SELECT gen_random_uuid() FROM generate_series(1, {batch}))");
    let claim = super::jobs::claim_some_sql(batch)
        .replace("($1::uuid[])", &format!("({tokens})"))
        .replace(CLAIM_ANSWER, HAND_OVER_SOME);
    script(&with_parameters(&claim))
}

/// The claim's node and lease, written in.
fn with_parameters(claim: &str) -> String {
    let claim = claim.replace("$2", "'pgbench'").replace("$3", "60");
    assert!(
        !claim.contains('$'),
        "every parameter of the claim is written in"
    );
    assert!(
        claim.contains("set_config('vidq_bench.jobs'"),
        "the claim hands over"
    );
    format!("{};", claim.trim())
}

/// The finalize of what the last claim handed over, then the next claim, in one pipeline.
fn script(claim: &str) -> String {
    format!(
        r#"\if :holding = 0
{claim}
\set holding 1
\endif
\startpipeline
BEGIN;
SELECT id FROM users WHERE id IN (SELECT owner_id FROM videos WHERE id = ANY(current_setting('vidq_bench.videos')::uuid[]))
 ORDER BY id FOR KEY SHARE;
UPDATE videos v
   SET status = 'ready', duration_ms = 2000, width = 320, height = 240, video_codec = 'h264',
       audio_codec = NULL, live_run = 1, live_attempt = 1,
       hls_key = 'videos/' || v.id || '/r1/a1/hls/index.m3u8',
       mp4_key = 'videos/' || v.id || '/r1/a1/video.mp4',
       thumbnail_key = 'videos/' || v.id || '/r1/a1/thumb.jpg',
       error_code = NULL, error_message = NULL, failed_at = NULL,
       ready_at = statement_timestamp(), updated_at = statement_timestamp()
 WHERE v.id = ANY(current_setting('vidq_bench.videos')::uuid[]);
WITH ins AS (
    INSERT INTO notification_outbox (event_id, event_type, owner_id, video_id, payload)
    SELECT gen_random_uuid(), 'video.ready', v.owner_id, v.id,
           jsonb_build_object('id', gen_random_uuid(), 'type', 'video.ready',
                              'occurred_at', v.updated_at, 'video_id', v.id,
                              'data', jsonb_build_object(
                                  'status', 'ready', 'run', 1, 'duration_ms', 2000,
                                  'width', 320, 'height', 240, 'source', 'upload',
                                  'playback', jsonb_build_object('hls_key', v.hls_key,
                                                                 'mp4_key', v.mp4_key,
                                                                 'thumbnail_key', v.thumbnail_key)))
      FROM videos v WHERE v.id = ANY(current_setting('vidq_bench.videos')::uuid[])
    RETURNING 1)
SELECT pg_notify('{events}', '') WHERE EXISTS (SELECT 1 FROM ins) AND NOT {nobody_waits};
{complete};
COMMIT;
{claim}
\endpipeline
"#,
        complete = super::jobs::COMPLETE_ALL_SQL
            .replace("$1", "current_setting('vidq_bench.jobs')")
            .replace("$2", "current_setting('vidq_bench.tokens')")
            .replace(
                "$3",
                "cardinality(current_setting('vidq_bench.jobs')::int8[])"
            ),
        events = super::deliveries::outbox::EVENTS_CHANNEL,
        nobody_waits = super::wake::nobody_waits_sql(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_scripts_claim_with_the_workers_statement_and_leave_no_parameter_open() {
        let one = one_job_per_transaction();
        assert!(one.contains("FOR UPDATE OF j SKIP LOCKED\n    LIMIT 1\n"));
        assert!(one.contains("synchronous_commit"));
        let eight = batched(8);
        assert!(eight.contains("LIMIT 8\n"));
        assert!(eight.contains("generate_series(1, 8)"));
        for script in [one, eight] {
            // The claim goes behind the COMMIT, in the same pipeline.
            let commit = script.find("COMMIT;").unwrap();
            let next_claim = script.rfind("WITH clock AS").unwrap();
            let end = script.find("\\endpipeline").unwrap();
            assert!(commit < next_claim && next_claim < end);
        }
    }
}
