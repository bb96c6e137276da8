//! What the operator dashboard and the API's `/metrics` read: the queue, running attempts,
//! jobs that need a human, outbox lag per endpoint, the sweepers' ledgers, live recordings,
//! the processes' own reports and time to READY. Plain reads, no locks; each is one
//! statement, so a dashboard refresh costs a handful of index scans.

use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Double, Integer, Jsonb, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

/// Bounds every later statement of the caller's transaction to `ms` milliseconds, so a
/// dashboard refresh over an unexpectedly large table gives up instead of holding a pooled
/// connection.
pub async fn bound_statements(conn: &mut AsyncPgConnection, ms: u32) -> diesel::QueryResult<()> {
    diesel::sql_query(format!("SET LOCAL statement_timeout = {ms}"))
        .execute(conn)
        .await
        .map(drop)
}

/// Jobs in one status.
#[derive(Debug, Clone, QueryableByName)]
pub struct StatusCount {
    /// `PENDING`, `PROCESSING`, `COMPLETED` or `DEAD`.
    #[diesel(sql_type = Text)]
    pub status: crate::domain::job::JobStatus,
    /// How many (for `COMPLETED`: in the last hour, so the count stays an index range
    /// however long the history is).
    #[diesel(sql_type = BigInt)]
    pub count: i64,
}

/// The queue by status: every PENDING, PROCESSING and DEAD job, and the jobs COMPLETED in
/// the last hour. Each count is a partial index's range.
pub async fn queue_by_status(
    conn: &mut AsyncPgConnection,
) -> diesel::QueryResult<Vec<StatusCount>> {
    diesel::sql_query(
        "SELECT 'PENDING' AS status, count(*) AS count FROM video_encoding_jobs WHERE status = 'PENDING'
         UNION ALL
         SELECT 'PROCESSING', count(*) FROM video_encoding_jobs WHERE status = 'PROCESSING'
         UNION ALL
         SELECT 'COMPLETED', count(*) FROM video_encoding_jobs
             WHERE status = 'COMPLETED' AND completed_at > now() - interval '1 hour'
         UNION ALL
         SELECT 'DEAD', count(*) FROM video_encoding_jobs WHERE status = 'DEAD'",
    )
    .load(conn)
    .await
}

/// A single number.
#[derive(Debug, Clone, QueryableByName)]
struct Seconds {
    #[diesel(sql_type = Nullable<Double>)]
    seconds: Option<f64>,
}

/// How long the oldest claimable PENDING job has waited, in seconds (`None`: none waits).
pub async fn oldest_pending_secs(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Option<f64>> {
    let row: Seconds = diesel::sql_query(
        "SELECT extract(epoch FROM now() - min(available_at))::float8 AS seconds
         FROM video_encoding_jobs WHERE status = 'PENDING' AND available_at <= now()",
    )
    .get_result(conn)
    .await?;
    Ok(row.seconds)
}

/// A running attempt.
#[derive(Debug, Clone, QueryableByName)]
pub struct RunningAttempt {
    /// Job id.
    #[diesel(sql_type = BigInt)]
    pub job_id: i64,
    /// Its video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub video_id: Uuid,
    /// `encode` or `repackage`.
    #[diesel(sql_type = Text)]
    pub kind: crate::domain::job::JobKind,
    /// Run and attempt.
    #[diesel(sql_type = Integer)]
    pub run: i32,
    /// Attempt within the run.
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
    /// The node holding the claim.
    #[diesel(sql_type = Text)]
    pub node_id: String,
    /// Seconds since the claim.
    #[diesel(sql_type = Double)]
    pub running_secs: f64,
    /// Seconds until the lease runs out (negative: expired, a reclaim is due).
    #[diesel(sql_type = Double)]
    pub lease_left_secs: f64,
    /// A split video's part number (`None`: the video's own job).
    #[diesel(sql_type = Nullable<Integer>)]
    pub part: Option<i32>,
}

/// Every PROCESSING job with its open attempt (which lives on the job row), oldest claim
/// first.
pub async fn running_attempts(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Vec<RunningAttempt>> {
    diesel::sql_query(
        "SELECT j.id AS job_id, j.video_id, j.kind, j.run, j.attempt_count AS attempt,
                coalesce(j.claimed_by, '') AS node_id,
                extract(epoch FROM now() - coalesce(j.claimed_at, now()))::float8 AS running_secs,
                extract(epoch FROM j.lease_until - now())::float8 AS lease_left_secs, j.part
         FROM video_encoding_jobs j
         WHERE j.status = 'PROCESSING'
         ORDER BY j.claimed_at NULLS LAST, j.id
         LIMIT $1",
    )
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}

/// A job as the dashboard lists it.
#[derive(Debug, Clone, QueryableByName)]
pub struct JobLine {
    /// Job id.
    #[diesel(sql_type = BigInt)]
    pub job_id: i64,
    /// Its video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub video_id: Uuid,
    /// The owner's name.
    #[diesel(sql_type = Text)]
    pub owner: String,
    /// `encode` or `repackage`.
    #[diesel(sql_type = Text)]
    pub kind: crate::domain::job::JobKind,
    /// Job status.
    #[diesel(sql_type = Text)]
    pub status: crate::domain::job::JobStatus,
    /// The video's status.
    #[diesel(sql_type = Text)]
    pub video_status: crate::domain::video::VideoStatus,
    /// Run and attempts used in it.
    #[diesel(sql_type = Integer)]
    pub run: i32,
    /// Attempts used in this run.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    /// The video's error code, or the last attempt's.
    #[diesel(sql_type = Nullable<Text>)]
    pub error_code: Option<crate::domain::failure::FailureCode>,
    /// Its message.
    #[diesel(sql_type = Nullable<Text>)]
    pub error_message: Option<String>,
    /// When the job was enqueued.
    #[diesel(sql_type = Timestamptz)]
    pub enqueued_at: DateTime<Utc>,
    /// A split video's part number (`None`: the video's own job).
    #[diesel(sql_type = Nullable<Integer>)]
    pub part: Option<i32>,
    /// A split video's own job: its parts done and in all, in its run.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub parts_done: Option<i64>,
    /// See `parts_done`.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub parts: Option<i64>,
}

const JOB_LINE: &str = "SELECT j.id AS job_id, j.video_id, u.name AS owner, j.kind, j.status,
        v.status AS video_status, j.run, j.attempt_count AS attempts,
        coalesce(v.error_code, last.error_code) AS error_code,
        coalesce(v.error_message, last.error_message, j.last_error) AS error_message,
        j.enqueued_at, j.part, split.done AS parts_done, split.total AS parts
 FROM video_encoding_jobs j
 JOIN videos v ON v.id = j.video_id
 JOIN users u ON u.id = v.owner_id
 LEFT JOIN LATERAL (
     SELECT count(*) FILTER (WHERE p.status = 'COMPLETED') AS done, count(*) AS total
     FROM video_encoding_jobs p WHERE p.parent_id = j.id AND p.run = j.run
     HAVING count(*) > 0
 ) split ON true
 LEFT JOIN LATERAL (
     SELECT a.error_code, a.error_message FROM job_attempt_log a
     WHERE a.job_id = j.id AND a.error_code IS NOT NULL
     ORDER BY a.id DESC LIMIT 1
 ) last ON true";

/// Jobs a human should look at: DEAD ones and finished ones whose video failed, newest
/// first (each side read through its partial index, then joined).
pub async fn needing_attention(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Vec<JobLine>> {
    diesel::sql_query(format!(
        "{JOB_LINE}
         WHERE j.id IN (
             (SELECT id FROM video_encoding_jobs WHERE status = 'DEAD' ORDER BY id DESC LIMIT $1)
             UNION ALL
             (SELECT fj.id FROM videos fv JOIN video_encoding_jobs fj ON fj.video_id = fv.id AND fj.parent_id IS NULL
              WHERE fv.failed_at IS NOT NULL AND fj.status = 'COMPLETED'
              ORDER BY fv.failed_at DESC LIMIT $1)
         )
         ORDER BY j.id DESC LIMIT $1"
    ))
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}

/// The newest jobs, whatever their state.
pub async fn recent_jobs(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Vec<JobLine>> {
    diesel::sql_query(format!("{JOB_LINE} ORDER BY j.id DESC LIMIT $1"))
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await
}

/// Undelivered events: how many and how old the oldest is.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct Backlog {
    /// Deliveries not yet delivered, discarded or exhausted, plus unrouted outbox rows.
    #[diesel(sql_type = BigInt)]
    pub pending: i64,
    /// Seconds since the oldest of them was committed.
    #[diesel(sql_type = Nullable<Double>)]
    pub oldest_secs: Option<f64>,
}

/// The outbox's backlog: unrouted rows and deliveries still to send.
pub async fn outbox_backlog(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Backlog> {
    diesel::sql_query(
        "SELECT (SELECT count(*) FROM notification_outbox WHERE routed_at IS NULL)
              + (SELECT count(*) FROM event_deliveries WHERE status IN ('pending', 'sending')) AS pending,
                extract(epoch FROM now() - least(
                    (SELECT min(created_at) FROM notification_outbox WHERE routed_at IS NULL),
                    (SELECT min(o.created_at) FROM event_deliveries d
                     JOIN notification_outbox o ON o.id = d.outbox_id
                     WHERE d.status IN ('pending', 'sending'))))::float8 AS oldest_secs",
    )
    .get_result(conn)
    .await
}

/// One webhook endpoint's delivery health.
#[derive(Debug, Clone, QueryableByName)]
pub struct EndpointHealth {
    /// Endpoint id.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: Uuid,
    /// Its owner's name.
    #[diesel(sql_type = Text)]
    pub owner: String,
    /// Where it points.
    #[diesel(sql_type = Text)]
    pub url: String,
    /// Deliveries waiting or in flight.
    #[diesel(sql_type = BigInt)]
    pub pending: i64,
    /// Seconds the oldest waiting one has waited since its event committed.
    #[diesel(sql_type = Nullable<Double>)]
    pub oldest_pending_secs: Option<f64>,
    /// Of the waiting ones, those that failed at least one try.
    #[diesel(sql_type = BigInt)]
    pub retrying: i64,
    /// Deliveries of the last day's events that were exhausted or discarded.
    #[diesel(sql_type = BigInt)]
    pub given_up_last_day: i64,
    /// Median commit-to-delivery lag of its last 100 deliveries, seconds.
    #[diesel(sql_type = Nullable<Double>)]
    pub lag_p50_secs: Option<f64>,
    /// When it was turned off.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub disabled_at: Option<DateTime<Utc>>,
    /// Why.
    #[diesel(sql_type = Nullable<Text>)]
    pub disabled_reason: Option<String>,
}

/// Every webhook endpoint with its backlog, retries, give-ups and lag; disabled ones and the
/// ones with a backlog first. Each number is a partial index's range or the endpoint's last
/// 100 deliveries, never its whole history.
pub async fn endpoint_health(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Vec<EndpointHealth>> {
    diesel::sql_query(
        "SELECT e.id, u.name AS owner, e.url,
            w.pending, w.oldest_pending_secs, w.retrying,
            (SELECT count(*) FROM event_deliveries d
             WHERE d.endpoint_id = e.id AND d.status IN ('exhausted', 'discarded')
               AND d.created_at > now() - interval '1 day') AS given_up_last_day,
            (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY recent.lag) FROM (
                SELECT extract(epoch FROM d.delivered_at - o.created_at) AS lag
                FROM event_deliveries d JOIN notification_outbox o ON o.id = d.outbox_id
                WHERE d.endpoint_id = e.id AND d.status = 'delivered'
                ORDER BY d.id DESC LIMIT 100) recent) AS lag_p50_secs,
            e.disabled_at, e.disabled_reason
         FROM webhook_endpoints e
         JOIN users u ON u.id = e.owner_id
         CROSS JOIN LATERAL (
             SELECT count(*) AS pending, count(*) FILTER (WHERE d.attempt_count > 0) AS retrying,
                    extract(epoch FROM now() - min(o.created_at))::float8 AS oldest_pending_secs
             FROM event_deliveries d JOIN notification_outbox o ON o.id = d.outbox_id
             WHERE d.endpoint_id = e.id AND d.status IN ('pending', 'sending')
         ) w
         ORDER BY (e.disabled_at IS NULL), w.pending DESC, e.created_at
         LIMIT $1",
    )
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}

/// Rows a sweeper still has to land, per ledger and axis.
#[derive(Debug, Clone, QueryableByName)]
pub struct SweepBacklog {
    /// `upload`, or a recording file axis (`init`, `segment`, `original`).
    #[diesel(sql_type = Text)]
    pub axis: String,
    /// Waiting rows.
    #[diesel(sql_type = BigInt)]
    pub pending: i64,
    /// Rows that failed at least once and wait for their next try.
    #[diesel(sql_type = BigInt)]
    pub retrying: i64,
    /// Seconds the oldest waiting row has waited.
    #[diesel(sql_type = Nullable<Double>)]
    pub oldest_secs: Option<f64>,
}

/// The sweepers' backlog: uploads through vidq waiting to land, and recording files.
pub async fn sweep_backlog(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Vec<SweepBacklog>> {
    diesel::sql_query(
        "SELECT a.axis, coalesce(b.pending, 0) AS pending, coalesce(b.retrying, 0) AS retrying,
                b.oldest_secs
         FROM unnest(ARRAY['upload', 'init', 'segment', 'original']) WITH ORDINALITY AS a(axis, n)
         LEFT JOIN (
             SELECT 'upload' AS axis, count(*) AS pending, count(*) FILTER (WHERE tries > 0) AS retrying,
                    extract(epoch FROM now() - min(updated_at))::float8 AS oldest_secs
             FROM uploads WHERE via = 'vidq' AND state = 'pending'
             UNION ALL
             SELECT axis, count(*), count(*) FILTER (WHERE tries > 0),
                    extract(epoch FROM now() - min(received_at))::float8
             FROM recording_files WHERE state = 'pending' GROUP BY axis
         ) b ON b.axis = a.axis
         ORDER BY a.n",
    )
    .load(conn)
    .await
}

/// A recording still being broadcast or settled.
#[derive(Debug, Clone, QueryableByName)]
pub struct OpenRecording {
    /// Recording id.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: Uuid,
    /// Its owner's name.
    #[diesel(sql_type = Text)]
    pub owner: String,
    /// `waiting`, `live`, `ending` or `ended`.
    #[diesel(sql_type = Text)]
    pub state: crate::domain::recording::RecordingState,
    /// The ingest node.
    #[diesel(sql_type = Text)]
    pub node_id: String,
    /// Segments received.
    #[diesel(sql_type = BigInt)]
    pub segments: i64,
    /// Of them, in S3.
    #[diesel(sql_type = BigInt)]
    pub uploaded: i64,
    /// Seconds since the encoder last sent something.
    #[diesel(sql_type = Nullable<Double>)]
    pub idle_secs: Option<f64>,
}

/// Recordings not yet finished (waiting, live, ending, ended without a video yet).
pub async fn open_recordings(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Vec<OpenRecording>> {
    diesel::sql_query(
        "SELECT r.id, u.name AS owner, r.state, r.node_id,
            (SELECT count(*) FROM recording_files f WHERE f.recording_id = r.id AND f.axis = 'segment') AS segments,
            (SELECT count(*) FROM recording_files f WHERE f.recording_id = r.id AND f.axis = 'segment'
               AND f.state = 'uploaded') AS uploaded,
            extract(epoch FROM now() - r.last_ingest_at)::float8 AS idle_secs
         FROM recordings r JOIN users u ON u.id = r.owner_id
         WHERE r.state IN ('waiting', 'live', 'ending', 'ended')
         ORDER BY r.created_at DESC LIMIT $1",
    )
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}

/// How many recordings are not yet finished (the `recordings_open_idx` states, plus `waiting`).
pub async fn open_recordings_count(conn: &mut AsyncPgConnection) -> diesel::QueryResult<i64> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let row: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM recordings WHERE state IN ('waiting', 'live', 'ending', 'ended')",
    )
    .get_result(conn)
    .await?;
    Ok(row.n)
}

/// A process's own report.
#[derive(Debug, Clone, QueryableByName)]
pub struct NodeReport {
    /// `api`, `worker`, `relay` or `sweeper`.
    #[diesel(sql_type = Text)]
    pub role: String,
    /// Its node id.
    #[diesel(sql_type = Text)]
    pub node_id: String,
    /// Attempts (or sends) it runs at once.
    #[diesel(sql_type = Integer)]
    pub slots: i32,
    /// Seconds since its last report.
    #[diesel(sql_type = Double)]
    pub seen_secs: f64,
    /// Seconds since it started.
    #[diesel(sql_type = Double)]
    pub up_secs: f64,
    /// What only it knows (a sweeper's breaker, say).
    #[diesel(sql_type = Jsonb)]
    pub detail: serde_json::Value,
    /// Jobs it holds a claim on: `job/attempt` pairs.
    #[diesel(sql_type = Nullable<Text>)]
    pub holding: Option<String>,
}

/// Every process that reported in the last day, the most recently seen first.
pub async fn node_reports(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Vec<NodeReport>> {
    diesel::sql_query(
        "SELECT n.role, n.node_id, n.slots,
            extract(epoch FROM now() - n.seen_at)::float8 AS seen_secs,
            extract(epoch FROM now() - n.started_at)::float8 AS up_secs,
            n.detail, h.holding
         FROM nodes n
         LEFT JOIN (
             SELECT j.claimed_by,
                    string_agg(j.id || '/' || j.run || '.' || j.attempt_count, ' ' ORDER BY j.id) AS holding
             FROM video_encoding_jobs j WHERE j.status = 'PROCESSING' GROUP BY j.claimed_by
         ) h ON n.role = 'worker' AND h.claimed_by = n.node_id
         WHERE n.seen_at > now() - interval '1 day'
         ORDER BY n.role, n.seen_at DESC, n.node_id",
    )
    .load(conn)
    .await
}

/// Time to READY in one slice of the last hour.
#[derive(Debug, Clone, QueryableByName)]
pub struct ReadySlice {
    /// Minutes before now the slice starts (60, 55, ... 5).
    #[diesel(sql_type = Integer)]
    pub minutes_ago: i32,
    /// Videos that became READY in it.
    #[diesel(sql_type = BigInt)]
    pub ready: i64,
    /// Median seconds from the video's creation to READY.
    #[diesel(sql_type = Nullable<Double>)]
    pub p50_secs: Option<f64>,
    /// 99th percentile.
    #[diesel(sql_type = Nullable<Double>)]
    pub p99_secs: Option<f64>,
}

/// The last hour in twelve 5-minute slices, oldest first, each with its time to READY
/// (from the video's creation, the confirm, to its READY commit; read through the jobs
/// completed in the hour).
pub async fn time_to_ready(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Vec<ReadySlice>> {
    diesel::sql_query(
        "WITH ready AS (
             SELECT v.ready_at, extract(epoch FROM v.ready_at - v.created_at) AS secs
             FROM video_encoding_jobs j JOIN videos v ON v.id = j.video_id
             WHERE j.status = 'COMPLETED' AND j.completed_at > now() - interval '1 hour'
               AND v.status = 'ready' AND j.parent_id IS NULL
         )
         SELECT (60 - 5 * s.i)::int4 AS minutes_ago, count(r.ready_at) AS ready,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY r.secs) AS p50_secs,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY r.secs) AS p99_secs
         FROM generate_series(0, 11) AS s(i)
         LEFT JOIN ready r
             ON r.ready_at >= now() - make_interval(mins => 60 - 5 * s.i)
            AND r.ready_at <  now() - make_interval(mins => 55 - 5 * s.i)
         GROUP BY s.i ORDER BY s.i",
    )
    .load(conn)
    .await
}
