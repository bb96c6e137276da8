//! `MAX_ATTEMPTS` is the one source of the attempt budget. SQL cannot read a Rust constant:
//! the job statements' literals are checked against it by a unit test in `db::jobs`, the
//! schema's CHECKs, the domains of its attempt columns and the last-attempt index here.

use diesel::QueryableByName;
use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use vidq::domain::job::MAX_ATTEMPTS;

use crate::support::db::TestDb;

#[derive(QueryableByName)]
struct Definition {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    definition: String,
}

/// The numbers an expression compares with (`attempt_count <= 3` -> 3).
fn numbers(definition: &str) -> Vec<i32> {
    definition
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

#[tokio::test]
async fn the_schema_caps_attempts_at_max_attempts() {
    let db = TestDb::new().await;
    let mut conn = vidq::db::pool::dedicated(&db.url).await.unwrap();
    let defs: Vec<Definition> = diesel::sql_query(
        "SELECT conname::text AS name, pg_get_constraintdef(oid) AS definition
           FROM pg_constraint
          WHERE contype = 'c'
            AND conrelid IN ('video_encoding_jobs'::regclass, 'job_attempt_log'::regclass,
                             'video_artifacts'::regclass, 'videos'::regclass)
            AND pg_get_constraintdef(oid) ~ 'attempt'
         UNION ALL
         SELECT format('%s.%s (%s)', a.attrelid::regclass, a.attname, t.typname),
                pg_get_constraintdef(c.oid)
           FROM pg_attribute a
           JOIN pg_type t ON t.oid = a.atttypid AND t.typtype = 'd'
           JOIN pg_constraint c ON c.contypid = t.oid
          WHERE a.attrelid IN ('video_encoding_jobs'::regclass, 'job_attempt_log'::regclass,
                               'video_artifacts'::regclass, 'videos'::regclass)
            AND a.attname ~ 'attempt' AND NOT a.attisdropped
         UNION ALL
         SELECT indexname::text, indexdef FROM pg_indexes
          WHERE tablename = 'video_encoding_jobs' AND indexdef ~ 'attempt_count'",
    )
    .load(&mut conn)
    .await
    .unwrap();
    let names: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    // The job's budget and the live attempt (domains), each ledger's attempt number, the
    // reaper's index.
    assert!(
        defs.len() >= 5,
        "expected the attempt CHECKs and index, found {names:?}"
    );
    let wrong: Vec<String> = defs
        .iter()
        .filter(|d| numbers(&d.definition).into_iter().max() != Some(MAX_ATTEMPTS))
        .map(|d| format!("{}: {}", d.name, d.definition))
        .collect();
    assert!(
        wrong.is_empty(),
        "these do not cap attempts at MAX_ATTEMPTS = {MAX_ATTEMPTS}:\n{}",
        wrong.join("\n")
    );
}
