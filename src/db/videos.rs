//! Videos: the client-visible result of a confirmed upload.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::schema::{video_encoding_jobs, videos};
use crate::domain::ids::{RecordingId, UploadId, UserId, VideoId};

/// A `videos` row.
#[derive(Debug, Clone, Queryable, QueryableByName, Selectable)]
#[diesel(table_name = videos)]
pub struct VideoRow {
    /// Primary key (UUIDv7).
    pub id: VideoId,
    /// The uploader.
    pub owner_id: UserId,
    /// The upload contract it was made from (`None`: a live recording).
    pub upload_id: Option<UploadId>,
    /// `queued | processing | ready | failed`.
    pub status: crate::domain::video::VideoStatus,
    /// Probed duration.
    pub duration_ms: Option<i64>,
    /// Probed width.
    pub width: Option<i32>,
    /// Probed height.
    pub height: Option<i32>,
    /// Probed video codec.
    pub video_codec: Option<String>,
    /// Probed audio codec.
    pub audio_codec: Option<String>,
    /// The attempt whose outputs are live.
    pub live_attempt: Option<i32>,
    /// HLS playlist key.
    pub hls_key: Option<String>,
    /// Progressive MP4 key.
    pub mp4_key: Option<String>,
    /// Thumbnail key.
    pub thumbnail_key: Option<String>,
    /// Stable failure code.
    pub error_code: Option<crate::domain::failure::FailureCode>,
    /// Human-readable failure.
    pub error_message: Option<String>,
    /// Created (the confirm's transaction time).
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// When it became ready.
    pub ready_at: Option<DateTime<Utc>>,
    /// The run whose outputs are live (with `live_attempt`, the live prefix).
    pub live_run: Option<i32>,
    /// The live recording it was made from (`None`: an upload).
    pub recording_id: Option<RecordingId>,
}

/// A video with its job's attempt count and queue status, as the status API shows it.
pub type VideoWithAttempts = (VideoRow, Option<i32>, Option<String>);

/// The video's own job, joined to its row: a split video's parts are jobs of the video too,
/// and never stand for it.
macro_rules! own_job {
    () => {
        video_encoding_jobs::table.on(video_encoding_jobs::video_id
            .eq(videos::id)
            .and(video_encoding_jobs::parent_id.is_null()))
    };
}

/// The queue status the status API derives from: a split video's job waiting for its parts
/// counts as `PROCESSING`, as its parts are being encoded.
fn job_status()
-> diesel::expression::SqlLiteral<diesel::sql_types::Nullable<diesel::sql_types::Text>> {
    diesel::dsl::sql(
        "CASE WHEN video_encoding_jobs.kind = 'stitch' AND video_encoding_jobs.status = 'PENDING'
              THEN 'PROCESSING' ELSE video_encoding_jobs.status::text END",
    )
}

/// Inserts a queued video.
pub async fn insert(
    mut conn: &AsyncPgConnection,
    id: VideoId,
    owner: UserId,
    upload: UploadId,
) -> QueryResult<VideoRow> {
    diesel::insert_into(videos::table)
        .values((
            videos::id.eq(id),
            videos::owner_id.eq(owner),
            videos::upload_id.eq(upload),
        ))
        .returning(VideoRow::as_returning())
        .get_result(&mut conn)
        .await
}

/// Inserts queued videos, the i-th from `ids[i]`, `owners[i]` and `uploads[i]`, in one
/// statement; joins the caller's transaction.
pub async fn insert_all(
    mut conn: &AsyncPgConnection,
    ids: Vec<VideoId>,
    owners: Vec<UserId>,
    uploads: Vec<UploadId>,
) -> QueryResult<Vec<VideoRow>> {
    use diesel::sql_types::{Array, Uuid as SqlUuid};
    super::prepared::prepared(
        "INSERT INTO videos (id, owner_id, upload_id)
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[])
         RETURNING *",
    )
    .bind::<Array<SqlUuid>, _>(ids)
    .bind::<Array<SqlUuid>, _>(owners)
    .bind::<Array<SqlUuid>, _>(uploads)
    .load(&mut conn)
    .await
}

/// Inserts the `queued` video of a finished live recording; joins the caller's transaction.
pub async fn insert_from_recording(
    conn: &mut AsyncPgConnection,
    id: VideoId,
    owner: UserId,
    recording: RecordingId,
) -> QueryResult<VideoRow> {
    diesel::insert_into(videos::table)
        .values((
            videos::id.eq(id),
            videos::owner_id.eq(owner),
            videos::recording_id.eq(recording),
        ))
        .returning(VideoRow::as_returning())
        .get_result(conn)
        .await
}

/// The video made from an upload, if any.
pub async fn find_by_upload(
    conn: &mut AsyncPgConnection,
    upload: UploadId,
) -> QueryResult<Option<VideoWithAttempts>> {
    videos::table
        .left_join(own_job!())
        .filter(videos::upload_id.eq(upload))
        .select(with_job())
        .first(conn)
        .await
        .optional()
}

/// What a read of videos joined to their jobs selects: the row, its job's attempts and state.
type WithJob = (
    diesel::dsl::AsSelect<VideoRow, diesel::pg::Pg>,
    diesel::dsl::Nullable<video_encoding_jobs::attempt_count>,
    diesel::expression::SqlLiteral<diesel::sql_types::Nullable<diesel::sql_types::Text>>,
);

fn with_job() -> WithJob {
    (
        VideoRow::as_select(),
        video_encoding_jobs::attempt_count.nullable(),
        job_status(),
    )
}

/// The video, only if `owner` holds it.
pub async fn find_owned(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    id: VideoId,
) -> QueryResult<Option<VideoWithAttempts>> {
    videos::table
        .left_join(own_job!())
        .filter(videos::id.eq(id).and(videos::owner_id.eq(owner)))
        .select(with_job())
        .first(conn)
        .await
        .optional()
}

/// The video, only if the holder of the key whose hash is `key_hash` owns it: the key's
/// lookup and the read in one statement, for the status read clients poll.
pub async fn find_by_key_hash(
    conn: &mut AsyncPgConnection,
    key_hash: &[u8],
    id: VideoId,
) -> QueryResult<Option<VideoWithAttempts>> {
    use super::schema::users;
    videos::table
        .inner_join(users::table)
        .left_join(own_job!())
        .filter(videos::id.eq(id).and(users::api_key_hash.eq(key_hash)))
        .select(with_job())
        .first(conn)
        .await
        .optional()
}

/// The videos of `ids` that exist, each with its owner's key hash, for a batch of status
/// reads that each check their own caller's key ([`crate::app::status_reads`]). One
/// statement however many ids: `= ANY($1)` keeps one prepared statement for every size.
pub async fn find_many_with_key_hash(
    conn: &mut AsyncPgConnection,
    ids: Vec<VideoId>,
) -> QueryResult<Vec<(VideoWithAttempts, Vec<u8>)>> {
    use super::schema::users;
    videos::table
        .inner_join(users::table)
        .left_join(own_job!())
        .filter(videos::id.eq_any(ids))
        .select((
            VideoRow::as_select(),
            video_encoding_jobs::attempt_count.nullable(),
            job_status(),
            users::api_key_hash,
        ))
        .load::<(VideoRow, Option<i32>, Option<String>, Vec<u8>)>(conn)
        .await
        .map(|rows| {
            rows.into_iter()
                .map(|(video, attempts, job, key_hash)| ((video, attempts, job), key_hash))
                .collect()
        })
}

/// One page of an owner's videos, newest first, strictly older than `before` when given.
/// UUIDv7 ids order by creation time, so the key is the id alone.
pub async fn list_owned(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    status: Option<&str>,
    before: Option<VideoId>,
    limit: i64,
) -> QueryResult<Vec<VideoWithAttempts>> {
    let mut query = videos::table
        .left_join(own_job!())
        .filter(videos::owner_id.eq(owner))
        .select(with_job())
        .order(videos::id.desc())
        .limit(limit)
        .into_boxed();
    // A video is `processing` while its job is claimed; the row itself says `queued` until
    // the finalize, so that a claim never has to write (and lock) the video row.
    let claimed = job_status().eq("PROCESSING");
    match status {
        Some("processing") => query = query.filter(videos::status.eq("queued").and(claimed)),
        Some("queued") => {
            query = query.filter(
                videos::status
                    .eq("queued")
                    .and(claimed.is_distinct_from(true)),
            )
        }
        Some(status) => query = query.filter(videos::status.eq(status.to_owned())),
        None => {}
    }
    if let Some(before) = before {
        query = query.filter(videos::id.lt(before));
    }
    query.load(conn).await
}

/// Locks one of `owner`'s videos `FOR UPDATE`. `None` if it is not theirs or is gone.
pub async fn lock_owned_for_update(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    id: VideoId,
) -> QueryResult<Option<VideoRow>> {
    videos::table
        .filter(videos::id.eq(id).and(videos::owner_id.eq(owner)))
        .select(VideoRow::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()
}

/// Locks the videos made from these contracts `FOR UPDATE`, in id order (the fixed lock order
/// within a table); returns their ids.
pub async fn lock_for_uploads(
    conn: &mut AsyncPgConnection,
    uploads: &[UploadId],
) -> QueryResult<Vec<VideoId>> {
    videos::table
        .filter(videos::upload_id.eq_any(uploads))
        .select(videos::id)
        .order(videos::id)
        .for_update()
        .load(conn)
        .await
}

/// Locks the videos made from these live recordings `FOR UPDATE`, in id order; returns their ids.
pub async fn lock_for_recordings(
    conn: &mut AsyncPgConnection,
    recordings: &[RecordingId],
) -> QueryResult<Vec<VideoId>> {
    videos::table
        .filter(videos::recording_id.eq_any(recordings))
        .select(videos::id)
        .order(videos::id)
        .for_update()
        .load(conn)
        .await
}

/// Deletes a video (its job cascades).
pub async fn delete(conn: &mut AsyncPgConnection, id: VideoId) -> QueryResult<usize> {
    diesel::delete(videos::table.filter(videos::id.eq(id)))
        .execute(conn)
        .await
}

/// Locks a video `FOR UPDATE`; `None` if it is gone.
pub async fn lock_for_update(
    conn: &mut AsyncPgConnection,
    id: VideoId,
) -> QueryResult<Option<VideoRow>> {
    videos::table
        .filter(videos::id.eq(id))
        .select(VideoRow::as_select())
        .for_update()
        .first(conn)
        .await
        .optional()
}

/// What a READY finalize records.
#[derive(Debug)]
pub struct ReadyFacts<'a> {
    /// Probed duration.
    pub duration_ms: i64,
    /// Probed width.
    pub width: i32,
    /// Probed height.
    pub height: i32,
    /// Probed video codec.
    pub video_codec: &'a str,
    /// Probed audio codec.
    pub audio_codec: Option<&'a str>,
    /// The run whose outputs are live.
    pub live_run: i32,
    /// The attempt whose outputs are live.
    pub live_attempt: i32,
    /// Playlist key.
    pub hls_key: &'a str,
    /// MP4 key.
    pub mp4_key: &'a str,
    /// Thumbnail key.
    pub thumbnail_key: &'a str,
}

/// The `updated_at` a video update returns.
#[derive(QueryableByName)]
struct UpdatedAt {
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    updated_at: DateTime<Utc>,
}

/// Marks a (locked) video ready; returns the transaction's timestamp.
///
/// The update can be done in place (HOT, migration 000013): it changes no indexed column, and
/// `failed_at` (indexed for the operators' failures) goes from NULL to NULL.
///
/// Hand-written rather than `diesel::update`: diesel never caches an UPDATE as a prepared
/// statement, so each finalize paid a Parse and a plan, and its pipeline waited a round trip
/// for that Parse's answer before the rest of the transaction could be sent.
pub async fn set_ready(
    mut conn: &AsyncPgConnection,
    id: VideoId,
    facts: &ReadyFacts<'_>,
) -> QueryResult<DateTime<Utc>> {
    use diesel::sql_types::{BigInt, Integer, Nullable, Text, Uuid as SqlUuid};
    super::prepared::prepared(
        "UPDATE videos
            SET status = 'ready', duration_ms = $2, width = $3, height = $4, video_codec = $5,
                audio_codec = $6, live_run = $7, live_attempt = $8, hls_key = $9, mp4_key = $10,
                thumbnail_key = $11, error_code = NULL, error_message = NULL, failed_at = NULL,
                ready_at = statement_timestamp(), updated_at = statement_timestamp()
          WHERE id = $1
      RETURNING updated_at",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<BigInt, _>(facts.duration_ms)
    .bind::<Integer, _>(facts.width)
    .bind::<Integer, _>(facts.height)
    .bind::<Text, _>(facts.video_codec)
    .bind::<Nullable<Text>, _>(facts.audio_codec)
    .bind::<Integer, _>(facts.live_run)
    .bind::<Integer, _>(facts.live_attempt)
    .bind::<Text, _>(facts.hls_key)
    .bind::<Text, _>(facts.mp4_key)
    .bind::<Text, _>(facts.thumbnail_key)
    .get_result::<UpdatedAt>(&mut conn)
    .await
    .map(|row| row.updated_at)
}

/// [`set_ready`] for several videos in one statement, each with its own facts (`ids[i]` gets
/// `facts[i]`); returns how many it updated. The rows are locked in the order the plan
/// visits them (see the lock order in `super`).
pub async fn set_all_ready<'f>(
    mut conn: &AsyncPgConnection,
    ids: Vec<VideoId>,
    facts: &[ReadyFacts<'f>],
) -> QueryResult<usize> {
    use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text, Uuid as SqlUuid};
    let column = |f: fn(&ReadyFacts<'f>) -> &'f str| facts.iter().map(f).collect::<Vec<_>>();
    let number = |f: fn(&ReadyFacts<'f>) -> i32| facts.iter().map(f).collect::<Vec<_>>();
    super::prepared::prepared(
        "UPDATE videos v
            SET status = 'ready', duration_ms = f.duration_ms, width = f.width,
                height = f.height, video_codec = f.video_codec, audio_codec = f.audio_codec,
                live_run = f.live_run, live_attempt = f.live_attempt, hls_key = f.hls_key,
                mp4_key = f.mp4_key, thumbnail_key = f.thumbnail_key, error_code = NULL,
                error_message = NULL, failed_at = NULL, ready_at = statement_timestamp(),
                updated_at = statement_timestamp()
           FROM unnest($1::uuid[], $2::int8[], $3::int4[], $4::int4[], $5::text[], $6::text[],
                       $7::int4[], $8::int4[], $9::text[], $10::text[], $11::text[])
                AS f (id, duration_ms, width, height, video_codec, audio_codec, live_run,
                      live_attempt, hls_key, mp4_key, thumbnail_key)
          WHERE v.id = f.id",
    )
    .bind::<Array<SqlUuid>, _>(ids)
    .bind::<Array<BigInt>, _>(facts.iter().map(|f| f.duration_ms).collect::<Vec<_>>())
    .bind::<Array<Integer>, _>(number(|f| f.width))
    .bind::<Array<Integer>, _>(number(|f| f.height))
    .bind::<Array<Text>, _>(column(|f| f.video_codec))
    .bind::<Array<Nullable<Text>>, _>(facts.iter().map(|f| f.audio_codec).collect::<Vec<_>>())
    .bind::<Array<Integer>, _>(number(|f| f.live_run))
    .bind::<Array<Integer>, _>(number(|f| f.live_attempt))
    .bind::<Array<Text>, _>(column(|f| f.hls_key))
    .bind::<Array<Text>, _>(column(|f| f.mp4_key))
    .bind::<Array<Text>, _>(column(|f| f.thumbnail_key))
    .execute(&mut conn)
    .await
}

/// Marks a (locked) video failed with a stable code; returns the transaction's timestamp.
/// Prepared once per connection, as [`set_ready`] is.
pub async fn set_failed(
    mut conn: &AsyncPgConnection,
    id: VideoId,
    code: &str,
    message: &str,
) -> QueryResult<DateTime<Utc>> {
    use diesel::sql_types::{Text, Uuid as SqlUuid};
    super::prepared::prepared(
        "UPDATE videos
            SET status = 'failed', error_code = $2, error_message = $3, ready_at = NULL,
                failed_at = statement_timestamp(), updated_at = statement_timestamp()
          WHERE id = $1
      RETURNING updated_at",
    )
    .bind::<SqlUuid, _>(id)
    .bind::<Text, _>(code)
    .bind::<Text, _>(message)
    .get_result::<UpdatedAt>(&mut conn)
    .await
    .map(|row| row.updated_at)
}

fn now_sql() -> diesel::expression::SqlLiteral<diesel::sql_types::Timestamptz> {
    diesel::dsl::sql::<diesel::sql_types::Timestamptz>("statement_timestamp()")
}

/// Back to `queued` for an operator retry: error and outputs cleared.
pub async fn requeue(conn: &mut AsyncPgConnection, id: VideoId) -> QueryResult<usize> {
    diesel::update(videos::table.filter(videos::id.eq(id)))
        .set((
            videos::status.eq("queued"),
            videos::error_code.eq(None::<String>),
            videos::error_message.eq(None::<String>),
            videos::ready_at.eq(None::<DateTime<Utc>>),
            videos::failed_at.eq(None::<DateTime<Utc>>),
            videos::updated_at.eq(now_sql()),
        ))
        .execute(conn)
        .await
}

/// The HLS playlist key of a ready video, whoever owns it (a playback token, not an API key,
/// authorizes the read); `None` if the video is gone or not ready.
pub async fn ready_hls_key(
    conn: &mut AsyncPgConnection,
    id: VideoId,
) -> QueryResult<Option<String>> {
    videos::table
        .filter(videos::id.eq(id).and(videos::status.eq("ready")))
        .select(videos::hls_key)
        .first::<Option<String>>(conn)
        .await
        .optional()
        .map(Option::flatten)
}
