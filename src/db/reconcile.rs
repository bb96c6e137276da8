//! What `vidq reconcile` reads of the ledger: plain reads in one read-only snapshot, no row
//! locks, so it never waits on or blocks the lock order in `db/mod.rs`.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Int4, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::domain::artifact::ArtifactState;
use crate::domain::upload::UploadState;

/// An upload contract that owns its key (every state but `rejected` and `expired`).
#[derive(Debug, Clone, QueryableByName)]
pub struct UploadKey {
    /// The contract.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: Uuid,
    /// The contracted key.
    #[diesel(sql_type = Text)]
    pub object_key: String,
    /// Size the object must have.
    #[diesel(sql_type = BigInt)]
    pub declared_size: i64,
    /// Its state (spelled as [`UploadState`]).
    #[diesel(sql_type = Text)]
    pub state: crate::domain::upload::UploadState,
    /// How its bytes reach S3 (spelled as [`UploadVia`](crate::domain::upload::UploadVia)).
    #[diesel(sql_type = Text)]
    pub via: crate::domain::upload::UploadVia,
    /// Spool file, relative to the root (uploads through vidq).
    #[diesel(sql_type = Nullable<Text>)]
    pub spool_path: Option<String>,
    /// Content type of the PUT.
    #[diesel(sql_type = Text)]
    pub content_type: String,
}

/// An artifact S3 is said to hold.
#[derive(Debug, Clone, QueryableByName)]
pub struct ArtifactKey {
    /// Owning video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub video_id: Uuid,
    /// The key.
    #[diesel(sql_type = Text)]
    pub object_key: String,
    /// Registered size.
    #[diesel(sql_type = BigInt)]
    pub size_bytes: i64,
}

/// A video, its live attempt and its job's current attempt.
#[derive(Debug, Clone, QueryableByName)]
pub struct VideoAttempts {
    /// The video.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: Uuid,
    /// Its status (spelled as `VideoStatus`).
    #[diesel(sql_type = Text)]
    pub status: crate::domain::video::VideoStatus,
    /// Run of the attempt that made it READY.
    #[diesel(sql_type = Nullable<Int4>)]
    pub live_run: Option<i32>,
    /// That attempt.
    #[diesel(sql_type = Nullable<Int4>)]
    pub live_attempt: Option<i32>,
    /// The job's current run.
    #[diesel(sql_type = Nullable<Int4>)]
    pub job_run: Option<i32>,
    /// The job's current attempt within that run (0 before the first claim).
    #[diesel(sql_type = Nullable<Int4>)]
    pub job_attempt: Option<i32>,
}

/// Everything the ledger says S3 should hold, read from one snapshot.
#[derive(Debug, Default)]
pub struct LedgerSnapshot {
    /// Contracts that own their key.
    pub uploads: Vec<UploadKey>,
    /// Artifacts in state `uploaded`.
    pub artifacts: Vec<ArtifactKey>,
    /// Every video.
    pub videos: Vec<VideoAttempts>,
    /// Every live recording's id.
    pub recordings: Vec<Uuid>,
    /// Live recording files that own their key (`pending` or `uploaded`).
    pub recording_files: Vec<RecordingFileKey>,
    /// Tail pieces of `s3`-store uploads still arriving.
    pub tail_pieces: Vec<TailPieceKey>,
}

/// A tail piece's key and its upload.
#[derive(Debug, Clone, QueryableByName)]
pub struct TailPieceKey {
    /// The upload.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub upload_id: Uuid,
    /// The piece's key.
    #[diesel(sql_type = Text)]
    pub object_key: String,
}

/// A live recording file that owns its key.
#[derive(Debug, Clone, QueryableByName)]
pub struct RecordingFileKey {
    /// Its recording.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub recording_id: Uuid,
    /// The key.
    #[diesel(sql_type = Text)]
    pub object_key: String,
    /// The ledger's size.
    #[diesel(sql_type = BigInt)]
    pub size_bytes: i64,
    /// Its state.
    #[diesel(sql_type = Text)]
    pub state: crate::domain::recording::FileState,
    /// SHA-256 (hex) of the bytes the row names; `None` for rows from before digests.
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    pub content_sha256: Option<String>,
}

/// Reads the snapshot in one `REPEATABLE READ, READ ONLY` transaction: the three reads see
/// one moment, and take no row lock.
pub async fn snapshot(conn: &mut AsyncPgConnection) -> diesel::QueryResult<LedgerSnapshot> {
    conn.build_transaction()
        .repeatable_read()
        .read_only()
        .run::<_, diesel::result::Error, _>(async |conn| {
            let uploads = diesel::sql_query(format!(
                "SELECT id, object_key, declared_size, state, via, spool_path, content_type
                       FROM uploads WHERE state NOT IN ('{rejected}', '{expired}') ORDER BY id",
                rejected = UploadState::Rejected.as_str(),
                expired = UploadState::Expired.as_str(),
            ))
            .load(conn)
            .await?;
            let artifacts = diesel::sql_query(format!(
                "SELECT video_id, object_key, size_bytes FROM video_artifacts
                      WHERE state = '{}' ORDER BY id",
                ArtifactState::Uploaded.as_str()
            ))
            .load(conn)
            .await?;
            let videos = diesel::sql_query(
                "SELECT v.id, v.status, v.live_run, v.live_attempt,
                            j.run AS job_run, j.attempt_count AS job_attempt
                       FROM videos v LEFT JOIN video_encoding_jobs j
                            ON j.video_id = v.id AND j.parent_id IS NULL
                      ORDER BY v.id",
            )
            .load(conn)
            .await?;
            #[derive(QueryableByName)]
            struct Id {
                #[diesel(sql_type = diesel::sql_types::Uuid)]
                id: Uuid,
            }
            let recordings: Vec<Id> = diesel::sql_query("SELECT id FROM recordings ORDER BY id")
                .load(conn)
                .await?;
            let recording_files = diesel::sql_query(format!(
                "SELECT recording_id, object_key, size_bytes, state, content_sha256 FROM recording_files
                  WHERE state IN ('{pending}', '{uploaded}') ORDER BY id",
                pending = crate::domain::recording::FileState::Pending.as_str(),
                uploaded = crate::domain::recording::FileState::Uploaded.as_str(),
            ))
            .load(conn)
            .await?;
            let tail_pieces = diesel::sql_query(
                "SELECT upload_id, object_key FROM tus_tail_pieces ORDER BY upload_id, start_offset",
            )
            .load(conn)
            .await?;
            Ok(LedgerSnapshot {
                tail_pieces,
                uploads,
                artifacts,
                videos,
                recordings: recordings.into_iter().map(|r| r.id).collect(),
                recording_files,
            })
        })
        .await
}
