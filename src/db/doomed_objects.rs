//! Objects the bucket is owed (`doomed_objects`). The transaction that deletes a video's rows
//! lists its objects here, and a READY transaction lists the prefixes of the attempts it
//! superseded, so the bucket's debt commits with the change that makes it: the API (or the
//! worker) deletes them at once and crosses them off, and what S3 refused then (an outage),
//! or what a process that died first left, any node's sweeper deletes later, with a backoff.
//! Deleting an object twice is harmless.

use diesel::sql_types::{BigInt, Bool, Double, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// One object, or every object under a prefix.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct Doomed {
    /// The row.
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// The key, or the prefix (ending in `/`).
    #[diesel(sql_type = Text)]
    pub key: String,
    /// Whether `key` is a prefix.
    #[diesel(sql_type = Bool)]
    pub is_prefix: bool,
}

/// Lists `keys` (single objects) and `prefixes` as owed, in the caller's transaction; a
/// sweeper takes them up 30 s later if they are still listed.
pub async fn owe(
    mut conn: &AsyncPgConnection,
    keys: &[String],
    prefixes: &[String],
) -> diesel::QueryResult<Vec<Doomed>> {
    if keys.is_empty() && prefixes.is_empty() {
        return Ok(Vec::new());
    }
    let all: Vec<String> = keys.iter().chain(prefixes).cloned().collect();
    let is_prefix: Vec<bool> = keys
        .iter()
        .map(|_| false)
        .chain(prefixes.iter().map(|_| true))
        .collect();
    diesel::sql_query(
        // Due for a sweeper only in 30 s: the API deletes them right after the commit, and a
        // sweeper takes up only what that left (or what a crash right after it left).
        "INSERT INTO doomed_objects (key, is_prefix, next_try_at)
         SELECT k, p, clock_timestamp() + interval '30 seconds'
           FROM unnest($1::text[], $2::bool[]) AS owed (k, p)
         RETURNING id, key, is_prefix",
    )
    .bind::<diesel::sql_types::Array<Text>, _>(all)
    .bind::<diesel::sql_types::Array<Bool>, _>(is_prefix)
    .load(&mut conn)
    .await
}

/// The worker that made a video READY deleted these prefixes itself, right after the commit
/// that owed them: a sweeper need not.
pub async fn paid_prefixes(
    conn: &mut AsyncPgConnection,
    prefixes: &[String],
) -> diesel::QueryResult<usize> {
    diesel::sql_query("DELETE FROM doomed_objects WHERE is_prefix AND key = ANY($1)")
        .bind::<diesel::sql_types::Array<Text>, _>(prefixes)
        .execute(conn)
        .await
}

/// Up to `limit` rows whose next try is due, each pushed `hold_secs` into the future so no
/// other sweeper takes it meanwhile (a sweeper that dies holding one only delays it).
pub async fn take_due(
    conn: &mut AsyncPgConnection,
    limit: i64,
    hold_secs: f64,
) -> diesel::QueryResult<Vec<Doomed>> {
    diesel::sql_query(
        "UPDATE doomed_objects d SET next_try_at = clock_timestamp() + make_interval(secs => $2)
          WHERE id IN (SELECT id FROM doomed_objects WHERE next_try_at <= clock_timestamp()
                        ORDER BY next_try_at LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING d.id, d.key, d.is_prefix",
    )
    .bind::<BigInt, _>(limit)
    .bind::<Double, _>(hold_secs)
    .load(conn)
    .await
}

/// The object (or prefix) is gone from the bucket: the debt is paid.
pub async fn paid(conn: &mut AsyncPgConnection, id: i64) -> diesel::QueryResult<usize> {
    diesel::sql_query("DELETE FROM doomed_objects WHERE id = $1")
        .bind::<BigInt, _>(id)
        .execute(conn)
        .await
}

/// A try failed: the next one after a backoff that doubles from 5 s to at most a minute, so
/// an object outlives the end of an S3 outage by a minute at most (a LIST or DELETE a minute
/// costs a down S3 nothing).
pub async fn failed(
    conn: &mut AsyncPgConnection,
    id: i64,
    error: &str,
) -> diesel::QueryResult<usize> {
    diesel::sql_query(
        "UPDATE doomed_objects SET tries = tries + 1, last_error = left($2, 500),
                next_try_at = clock_timestamp() + least(interval '1 minute', interval '5 seconds' * power(2, least(tries, 10)))
          WHERE id = $1",
    )
    .bind::<BigInt, _>(id)
    .bind::<Text, _>(error)
    .execute(conn)
    .await
}
