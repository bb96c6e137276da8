//! Upload contracts: issuing one (a presigned PUT to a server-chosen key) and confirming it
//! (the transaction that turns bytes in S3 into a queued video).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::Utc;
use diesel_async::{AsyncConnection as _, AsyncPgConnection};

use super::confirm_batch::{AcceptOutcome, Acceptance};
use super::open_work::{self, OpenWork};
use super::videos::{VideoView, view};
use super::{AppContext, AppError};
use crate::adapters::storage::PresignedPut;
use crate::app::UploadError;
use crate::db::{self, videos::VideoRow, videos::VideoWithAttempts};
use crate::domain::event::Event;
use crate::domain::ids::{UploadId, UserId, VideoId};
use crate::domain::job::{JobKind, JobStatus};
use crate::domain::keys;
use crate::domain::upload::{NewUpload, UploadState};

/// What the API shows of a new contract (not the row: a column change must not reach the wire).
#[derive(Debug, Clone)]
pub struct IssuedUpload {
    /// The contract's id.
    pub id: uuid::Uuid,
    /// The contracted key (`originals/{id}`), for callers that PUT it themselves.
    pub object_key: String,
    /// When the presigned PUT stops working.
    pub expires_at: chrono::DateTime<Utc>,
}

/// A new contract and where to PUT the bytes.
#[derive(Debug)]
pub struct CreatedUpload {
    /// The stored contract.
    pub upload: IssuedUpload,
    /// Presigned PUT to its key.
    pub presigned: PresignedPut,
}

/// Checks the request, records a pending contract and presigns a PUT to `originals/{id}`.
#[tracing::instrument(skip_all, fields(owner = %owner))]
pub async fn create_upload(
    ctx: &AppContext,
    owner: UserId,
    filename: &str,
    content_type: &str,
    size_bytes: i64,
) -> Result<CreatedUpload, AppError> {
    let request = NewUpload::parse(
        filename,
        content_type,
        size_bytes,
        ctx.upload.max_upload_bytes,
    )?;
    let id = UploadId::new();
    let key = keys::original(id);
    let ttl = Duration::from_secs(ctx.upload.upload_url_ttl_secs);
    let size = i64::try_from(request.size_bytes).expect("size was checked against the limit");
    // Signing is local computation; no S3 round trip happens here. The declared length is
    // part of the signature, so S3 refuses a PUT of any other size.
    let presigned = ctx
        .storage
        .presign_put(&key, &request.content_type, size, ttl)
        .await?;
    let expires_at = Utc::now() + ttl;
    let row = db::uploads::NewUploadRow {
        id,
        owner_id: owner,
        object_key: &key,
        filename: &request.filename,
        content_type: &request.content_type,
        declared_size: size,
        expires_at,
        checksum: None,
        tus_metadata: None,
    };
    let cap = ctx.upload.max_open_uploads_per_user;
    let _turn = open_work::turn(owner, OpenWork::Uploads).await;
    let mut conn = ctx.db.get().await?;
    let upload = conn
        .transaction::<_, AppError, _>(async |conn| {
            open_work::admit(conn, owner, OpenWork::Uploads, cap).await?;
            Ok(db::uploads::insert(conn, &row).await?)
        })
        .await?;
    tracing::info!(upload_id = %id, size, "upload contract issued");
    let upload = IssuedUpload {
        id: upload.id.0,
        object_key: upload.object_key,
        expires_at: upload.expires_at,
    };
    Ok(CreatedUpload { upload, presigned })
}

/// Whether a confirm created the video or found it already made.
#[derive(Debug)]
pub enum Confirmed {
    /// This call created the video, its job and its `video.accepted` event.
    Created(VideoView),
    /// An earlier (or concurrent) confirm did; nothing was added.
    AlreadyConfirmed(VideoView),
}

/// Confirms an upload: HEAD the contracted object, check its size, then in ONE transaction
/// move the contract to `confirmed` (CAS), insert the video, its PENDING job and the
/// `video.accepted` outbox row (invariant I1). Idempotent: a repeat, or a loser of a race,
/// returns the same video and adds nothing.
pub async fn confirm_upload(
    ctx: &AppContext,
    owner: UserId,
    upload_id: UploadId,
) -> Result<Confirmed, AppError> {
    let upload = {
        let mut conn = ctx.db.get().await?;
        db::uploads::find_owned(&mut conn, owner, upload_id)
            .await?
            .ok_or(AppError::NotFound)?
    };
    confirm_found(ctx, upload).await
}

/// [`confirm_upload`] for the holder of `presented_key`, with the key's lookup and the
/// contract's read in one statement: `Unauthorized` for a key nobody holds, `NotFound` for
/// a contract that is not theirs.
pub async fn confirm_upload_with_key(
    ctx: &AppContext,
    presented_key: &str,
    upload_id: UploadId,
) -> Result<Confirmed, AppError> {
    let upload = super::auth::read_with_key(&ctx.db, presented_key, async |conn, hash| {
        db::uploads::find_by_key_hash(conn, hash, upload_id).await
    })
    .await?;
    confirm_found(ctx, upload).await
}

/// The confirm of a contract already read and known to be its caller's.
// The span is named for what the caller asked for, whichever function answers it.
#[tracing::instrument(
    name = "confirm_upload",
    skip_all,
    fields(owner = %upload.owner_id, upload_id = %upload.id)
)]
async fn confirm_found(
    ctx: &AppContext,
    upload: db::uploads::UploadRow,
) -> Result<Confirmed, AppError> {
    let (owner, upload_id) = (upload.owner_id, upload.id);
    let state = upload.state;
    if state == UploadState::Confirmed {
        return existing_video(ctx, upload_id)
            .await
            .map(Confirmed::AlreadyConfirmed);
    }
    if !state.confirmable() {
        return Err(AppError::Upload(UploadError::UploadClosed { state }));
    }

    // S3 is asked with no connection held and no transaction open.
    let Some(head) = ctx.storage.head(&upload.object_key).await? else {
        // No object: either nothing was PUT yet, or the contract was deleted (with its
        // object) since it was read; the latter is a 404 like any unknown id.
        let mut conn = ctx.db.get().await?;
        return match db::uploads::find_owned(&mut conn, owner, upload_id).await? {
            Some(_) => Err(AppError::Upload(UploadError::UploadIncomplete)),
            None => Err(AppError::NotFound),
        };
    };
    if head.size != upload.declared_size {
        tracing::info!(
            declared = upload.declared_size,
            actual = head.size,
            "confirm refused: size mismatch"
        );
        return Err(AppError::Upload(UploadError::SizeMismatch {
            declared: upload.declared_size,
            actual: head.size,
        }));
    }

    // Committed in a batch with the confirms queued beside it (`app::confirm_batch`).
    let accepted = ctx
        .confirms
        .accept(Acceptance {
            owner,
            upload_id,
            object_key: upload.object_key,
        })
        .await?;
    let pending = JobStatus::Pending.as_str();
    let created: Option<VideoWithAttempts> =
        accepted.map(|accepted| (accepted.video, Some(0), Some(pending.to_owned())));

    match created {
        Some(video) => {
            tracing::info!(video_id = %video.0.id, "upload confirmed; encoding job queued");
            Ok(Confirmed::Created(view(ctx, video).await?))
        }
        None => existing_video(ctx, upload_id)
            .await
            .map(Confirmed::AlreadyConfirmed),
    }
}

/// What [`accept`] wrote.
#[derive(Debug)]
pub struct Accepted {
    /// The new, queued video.
    pub video: VideoRow,
    /// Its PENDING encoding job.
    pub job_id: i64,
}

/// The confirm's one transaction (after the HEAD and size check): lock the uploader, CAS the
/// contract to `confirmed`, insert the video, its PENDING job and the `video.accepted`
/// outbox row, and wake a worker. `None` when a concurrent confirm committed first (its video
/// is the answer); `UploadClosed` when the contract was expired or rejected in between. The
/// API's confirms run the same statements over arrays, several at once ([`accept_all`], by
/// way of `app::confirm_batch`), and come here one by one when their batch failed as a
/// whole. The sweeper confirms an upload through vidq through this, and `vidq bench queue`
/// enqueues through it.
pub async fn accept(
    conn: &mut AsyncPgConnection,
    owner: UserId,
    upload_id: UploadId,
    object_key: &str,
) -> Result<Option<Accepted>, AppError> {
    // One round trip (`db::pipelined`): BEGIN, the lock, the CAS, the inserts and COMMIT go
    // out back to back, and PostgreSQL runs them in that order, so the lock order holds:
    // users first, so a concurrent user deletion waits or wins cleanly. Nothing sent waits
    // on an answer: the CAS is a fence that fails on the server when it matches nothing, and
    // every other statement can fail only there (a constraint; a missing uploader fails the
    // video's foreign key), so any failure turns the COMMIT into a rollback.
    let video_id = VideoId::new();
    let event = Event::video_accepted(
        video_id,
        upload_id,
        Utc::now(), // replaced by the new video's time (insert_stamped)
    );
    let tx = db::pipelined::PipelinedTx::new(conn);
    let c = tx.conn();
    // Every answer is read, not the first error: after a failed statement the rest answer
    // "transaction aborted", and the cause is found below in statement order.
    let (user, confirmed, video, job_id, notified, stamped) = tx
        .run(async {
            Ok::<_, AppError>(futures_util::join!(
                db::users::lock_for_key_share(c, owner),
                db::uploads::mark_confirmed(c, upload_id),
                db::videos::insert(c, video_id, owner, upload_id),
                db::jobs::insert(c, video_id, object_key, JobKind::Encode),
                db::jobs::notify_claimable(c),
                db::deliveries::outbox::insert_stamped(c, &event),
            ))
        })
        .await?;
    drop(tx);
    if user?.is_none() {
        return Err(AppError::NotFound);
    }
    if confirmed? == 0 {
        return not_confirmed(conn, upload_id).await;
    }
    let (video, job_id) = (video?, job_id?);
    notified?;
    stamped?;
    Ok(Some(Accepted { video, job_id }))
}

/// [`accept`] for several confirms in one transaction of two round trips (one more than a
/// confirm alone, as the videos to create depend on which contracts moved) and the same
/// number of statements as one: each confirm's contract, video, job and event still commit
/// together (I1). The locks follow the lock order: every owner of the batch `FOR KEY SHARE`,
/// then every contract, each table's rows in id order. Answers come in `acceptances`' order,
/// each what [`accept`] would have answered alone (a contract named twice becomes one video,
/// for the first to name it). An `Err` means the transaction failed as a whole and wrote
/// nothing.
pub async fn accept_all(
    conn: &mut AsyncPgConnection,
    acceptances: &[Acceptance],
) -> Result<Vec<AcceptOutcome>, AppError> {
    let mut owners: Vec<UserId> = acceptances.iter().map(|a| a.owner).collect();
    owners.sort_unstable();
    owners.dedup();
    let uploads = acceptances.iter().map(|a| a.upload_id).collect();
    let tx = db::pipelined::PipelinedTx::new(conn);
    let c = tx.conn();
    let (present, moved) = tx
        .begin_with(async {
            // The plan setting goes first, for the batch's statements over arrays behind it.
            let ((), present, moved) = futures_util::try_join!(
                db::prepared::generic_plans_in_this_transaction(c),
                db::users::lock_all_for_key_share(c, owners),
                db::uploads::mark_all_confirmed(c, uploads),
            )?;
            Ok::<_, AppError>((present, moved))
        })
        .await?;
    let present: HashSet<UserId> = present.into_iter().collect();
    let mut moved: HashSet<UploadId> = moved.into_iter().collect();
    // The video each confirm creates, by its place in the batch.
    let created: Vec<Option<VideoId>> = acceptances
        .iter()
        .map(|a| moved.remove(&a.upload_id).then(VideoId::new))
        .collect();
    let orphaned = acceptances
        .iter()
        .zip(&created)
        .any(|(a, video)| video.is_some() && !present.contains(&a.owner));
    let (mut videos, mut jobs) = if created.iter().all(Option::is_none) {
        tx.rollback().await?;
        Default::default()
    } else if orphaned {
        // A contract whose owner's row is gone, which its foreign key's cascade rules out;
        // nothing is kept, and the caller retries each confirm alone, as [`accept`] answers it.
        tx.rollback().await?;
        return Err(AppError::NotFound);
    } else {
        insert_created(&tx, acceptances, &created).await?
    };
    drop(tx);
    let mut answers = Vec::with_capacity(acceptances.len());
    for (a, video) in acceptances.iter().zip(created) {
        answers.push(match video {
            Some(id) => Ok(Some(Accepted {
                video: videos.remove(&id).expect("each new video is returned"),
                job_id: jobs.remove(&id).expect("each new video has its job"),
            })),
            None => answer_unmoved(conn, &present, a).await,
        });
    }
    Ok(answers)
}

/// The second half of [`accept_all`]'s transaction, sent with its `COMMIT`: the new videos,
/// their jobs, the workers' wake-up and the `video.accepted` events. Returns the videos and
/// the jobs' ids by video id.
async fn insert_created(
    tx: &db::pipelined::PipelinedTx<'_>,
    acceptances: &[Acceptance],
    created: &[Option<VideoId>],
) -> Result<(HashMap<VideoId, VideoRow>, HashMap<VideoId, i64>), AppError> {
    let (mut ids, mut owners, mut uploads, mut keys, mut events) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (a, video) in acceptances.iter().zip(created) {
        let Some(video) = *video else { continue };
        ids.push(video);
        owners.push(a.owner);
        uploads.push(a.upload_id);
        keys.push(a.object_key.clone());
        // The time is replaced by the new video's (insert_all_stamped).
        events.push(Event::video_accepted(video, a.upload_id, Utc::now()));
    }
    let c = tx.conn();
    let job_videos = ids.clone();
    let (videos, jobs, (), ()) = tx
        .commit_with(async {
            futures_util::try_join!(
                db::videos::insert_all(c, ids, owners, uploads),
                db::jobs::insert_all(c, job_videos, keys, JobKind::Encode),
                db::jobs::notify_claimable(c),
                db::deliveries::outbox::insert_all_stamped(c, &events),
            )
            .map_err(AppError::from)
        })
        .await?;
    Ok((
        videos.into_iter().map(|v| (v.id, v)).collect(),
        jobs.into_iter().collect(),
    ))
}

/// The answer of a batch's confirm whose contract the batch did not move: its owner is gone,
/// or [`not_confirmed`] tells why.
async fn answer_unmoved(
    conn: &mut AsyncPgConnection,
    present: &HashSet<UserId>,
    acceptance: &Acceptance,
) -> AcceptOutcome {
    if !present.contains(&acceptance.owner) {
        return Err(AppError::NotFound);
    }
    not_confirmed(conn, acceptance.upload_id).await
}

/// Why a contract's CAS to `confirmed` found nothing: a concurrent confirm won (`None`: its
/// video is the answer), or the sweeper expired or rejected the contract after the confirm
/// read it (409 upload_closed). Either committed before the CAS, so its state is there to read.
async fn not_confirmed(
    conn: &mut AsyncPgConnection,
    upload_id: UploadId,
) -> Result<Option<Accepted>, AppError> {
    let state = db::uploads::state_of(conn, upload_id)
        .await?
        .ok_or(AppError::NotFound)?;
    match state.parse().map_err(db::DbError::from)? {
        UploadState::Confirmed => Ok(None),
        state => Err(AppError::Upload(UploadError::UploadClosed { state })),
    }
}

async fn existing_video(ctx: &AppContext, upload_id: UploadId) -> Result<VideoView, AppError> {
    let found = {
        let mut conn = ctx.db.get().await?;
        db::videos::find_by_upload(&mut conn, upload_id).await?
    };
    // A confirmed contract whose video is gone was deleted in between: nothing to show.
    let found = found.ok_or(AppError::NotFound)?;
    view(ctx, found).await
}
