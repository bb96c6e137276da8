//! The sweeper's passes that end recordings nobody ended: quiet ones (idle, or never
//! streamed) end, and ended ones are closed once their cutoff has passed.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::domain::ids::RecordingId;
use crate::domain::recording::{EndReason, FileAxis, FileState, RecordingState};

/// CAS `live -> ending` (`idle`) for `node`'s recordings with nothing received for
/// `idle_secs`, their cutoff `grace_secs` after the end; returns their ids.
pub async fn end_idle(
    conn: &mut AsyncPgConnection,
    node: &str,
    idle_secs: f64,
    grace_secs: f64,
) -> QueryResult<Vec<RecordingId>> {
    end_quiet(conn, node, Quiet::Idle, idle_secs, grace_secs).await
}

/// CAS `waiting -> ending` (`expired`) for `node`'s recordings created more than `ttl_secs`
/// ago that never received a file or playlist, their cutoff `grace_secs` after the end (a
/// file racing the expiry still counts, as after any end); returns their ids.
pub async fn expire_waiting(
    conn: &mut AsyncPgConnection,
    node: &str,
    ttl_secs: f64,
    grace_secs: f64,
) -> QueryResult<Vec<RecordingId>> {
    end_quiet(conn, node, Quiet::NeverStreamed, ttl_secs, grace_secs).await
}

/// Which silence ends a recording by itself.
#[derive(Clone, Copy)]
enum Quiet {
    /// `live`, nothing received since `last_ingest_at`.
    Idle,
    /// `waiting`: nothing ever received since `created_at`.
    NeverStreamed,
}

/// The CAS of [`end_idle`] and [`expire_waiting`]: `node`'s recordings quiet for `secs` end.
async fn end_quiet(
    conn: &mut AsyncPgConnection,
    node: &str,
    quiet: Quiet,
    secs: f64,
    grace_secs: f64,
) -> QueryResult<Vec<RecordingId>> {
    #[derive(QueryableByName)]
    struct Ended {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        id: RecordingId,
    }
    let (from, reason, since) = match quiet {
        Quiet::Idle => (RecordingState::Live, EndReason::Idle, "last_ingest_at"),
        Quiet::NeverStreamed => (RecordingState::Waiting, EndReason::Expired, "created_at"),
    };
    let ended: Vec<Ended> = diesel::sql_query(format!(
        "UPDATE recordings
            SET state = '{ending}', end_reason = '{reason}', ended_at = statement_timestamp(),
                cutoff_at = statement_timestamp() + make_interval(secs => $3),
                updated_at = statement_timestamp()
          WHERE node_id = $1 AND state = '{from}'
            AND {since} < statement_timestamp() - make_interval(secs => $2)
         RETURNING id",
        ending = RecordingState::Ending.as_str(),
        reason = reason.as_str(),
        from = from.as_str(),
    ))
    .bind::<Text, _>(node)
    .bind::<diesel::sql_types::Double, _>(secs)
    .bind::<diesel::sql_types::Double, _>(grace_secs)
    .load(conn)
    .await?;
    Ok(ended.into_iter().map(|e| e.id).collect())
}

/// CAS `ending -> ended` for `node`'s recordings past their cutoff: what they hold is
/// final. In the same statement, their segments that no playlist gave a duration (the
/// encoder stopped before naming them) are `excluded`: no player could be told their
/// length, and they would hold the playlist's end back for good.
pub async fn close_past_cutoff(conn: &mut AsyncPgConnection, node: &str) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "WITH closed AS (
             UPDATE recordings SET state = '{ended}', updated_at = statement_timestamp()
              WHERE node_id = $1 AND state = '{ending}' AND cutoff_at < statement_timestamp()
             RETURNING id),
         unnamed AS (
             UPDATE recording_files f
                SET state = '{excluded}', claimed_until = NULL, uploaded_at = NULL
               FROM closed
              WHERE f.recording_id = closed.id AND f.axis = '{segment}'
                AND f.duration_ms IS NULL AND f.state IN ('{pending}', '{uploaded}')
             RETURNING 1)
         -- A data-modifying WITH runs whether or not the query reads it.
         SELECT count(*) AS n FROM closed",
        ended = RecordingState::Ended.as_str(),
        ending = RecordingState::Ending.as_str(),
        excluded = FileState::Excluded.as_str(),
        segment = FileAxis::Segment.as_str(),
        pending = FileState::Pending.as_str(),
        uploaded = FileState::Uploaded.as_str(),
    ))
    .bind::<Text, _>(node)
    .get_result::<Count>(conn)
    .await
    .map(|c| c.n as usize)
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// CAS `waiting | live | ending -> failed` (`no_video_stream`), ended and cut off now: the
/// broadcast has no video vidq can decode, so no file of it is taken any more and no encode
/// is tried. 0 when it had ended otherwise already.
pub async fn fail_without_video(
    conn: &mut AsyncPgConnection,
    id: RecordingId,
) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "UPDATE recordings SET state = '{failed}', end_reason = '{reason}',
                ended_at = COALESCE(ended_at, statement_timestamp()),
                cutoff_at = statement_timestamp(), updated_at = statement_timestamp()
          WHERE id = $1 AND state IN ('{waiting}', '{live}', '{ending}')",
        failed = RecordingState::Failed.as_str(),
        reason = EndReason::NoVideoStream.as_str(),
        waiting = RecordingState::Waiting.as_str(),
        live = RecordingState::Live.as_str(),
        ending = RecordingState::Ending.as_str(),
    ))
    .bind::<diesel::sql_types::Uuid, _>(id)
    .execute(conn)
    .await
}
