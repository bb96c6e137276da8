//! Uploaders: creating one with a fresh API key, and deleting one with everything they own.

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::AsyncConnection;

use super::doomed::{Debt, pay};
use super::{AppContext, AppError};
use crate::db::doomed_objects::Doomed;
use crate::db::{self, DbPool};
use crate::domain::api_key::ApiKey;
use crate::domain::ids::{UploadId, UserId};

/// Creates a user and returns the API key, which exists nowhere else after this returns.
pub async fn create_user(db: &DbPool, name: &str) -> Result<(UserId, ApiKey), AppError> {
    create_user_as(db, name, false).await
}

/// [`create_user`]; `operator`: the key also logs in to the dashboard.
pub async fn create_user_as(
    db: &DbPool,
    name: &str,
    operator: bool,
) -> Result<(UserId, ApiKey), AppError> {
    let name = name.trim();
    if !(1..=100).contains(&name.chars().count()) || name.chars().any(char::is_control) {
        return Err(AppError::BadRequest(
            "a user name has 1-100 characters and no control characters".to_owned(),
        ));
    }
    let id = UserId::new();
    let key = ApiKey::generate();
    let mut conn = db.get().await?;
    match db::users::insert(&mut conn, id, name, &key.hash(), operator).await {
        Ok(_) => Ok((id, key)),
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
            Err(AppError::NameTaken(name.to_owned()))
        }
        Err(err) => Err(err.into()),
    }
}

/// A fresh key for the user named `name`, created if missing: the key `vidq dev` fills
/// into its upload page on each run, so the videos of earlier runs stay with one user while
/// only this run's key opens them.
pub async fn fresh_key_for(db: &DbPool, name: &str) -> Result<ApiKey, AppError> {
    let key = ApiKey::generate();
    let mut conn = db.get().await?;
    if db::users::replace_key_by_name(&mut conn, name, &key.hash())
        .await?
        .is_some()
    {
        return Ok(key);
    }
    drop(conn);
    match create_user(db, name).await {
        Ok((_, key)) => Ok(key),
        // Made by another process meanwhile: take it over.
        Err(AppError::NameTaken(_)) => Box::pin(fresh_key_for(db, name)).await,
        Err(other) => Err(other),
    }
}

/// Most upload contracts (with their videos and jobs), or outbox rows (with their
/// deliveries), one transaction of a user's deletion locks and removes.
pub const DELETE_PAGE: i64 = 500;

/// How often the last step may find rows that arrived meanwhile before deletion gives up
/// (the key is revoked first, so only requests already in flight can add any).
const FINAL_TRIES: usize = 5;

/// What deleting a user removed.
#[derive(Debug, PartialEq, Eq)]
pub struct DeletedUser {
    /// Videos removed with the user.
    pub videos: usize,
    /// S3 objects removed after the rows.
    pub objects: usize,
    /// Transactions that removed rows (pages, and the last one that removes the user).
    pub transactions: usize,
}

/// Deletes a user with their uploads, videos, jobs, events, webhooks and deliveries, in pages
/// of [`DELETE_PAGE`] so that memory and the number of rows locked at once stay bounded
/// whatever the user owns:
///
/// 1. the user's API key is revoked, so no new upload, webhook or resend arrives, and the
///    multipart uploads of their `s3`-store uploads still arriving are aborted;
/// 2. one transaction per page of upload contracts locks them, their videos and jobs (lock
///    order users -> uploads -> videos -> jobs, see `db`) and deletes them; the page's
///    objects are deleted after it commits;
/// 3. one transaction per page of live recordings locks their videos and deletes them (their
///    files, videos and jobs cascade); the page's objects are deleted after it commits;
/// 4. one transaction per page of outbox rows deletes them with their deliveries;
/// 5. a last transaction locks the user `FOR UPDATE` and deletes it with its endpoints.
///
/// A crash anywhere leaves a user without a key and with fewer rows, which a second
/// `vidq user delete` finishes; the objects of the rows already gone were listed as owed in
/// the same transactions, and a sweeper deletes whatever this run did not.
#[tracing::instrument(skip_all, fields(user = name))]
pub async fn delete_user(ctx: &AppContext, name: &str) -> Result<DeletedUser, AppError> {
    let user = {
        let mut conn = ctx.db.get().await?;
        db::users::revoke_key_by_name(&mut conn, name, &ApiKey::generate().hash())
            .await?
            .ok_or(AppError::NotFound)?
    };
    let mut deleted = DeletedUser {
        videos: 0,
        objects: 0,
        transactions: 0,
    };
    // Uploads still arriving into S3 multipart uploads: their parts are not objects a
    // listing shows, so they are aborted while the rows still name them.
    deleted.objects += super::ingest_s3::abort_all_of(ctx, user).await?;
    for _ in 0..FINAL_TRIES {
        while let Some((videos, owed)) = delete_upload_page(ctx, user).await? {
            deleted.transactions += 1;
            deleted.videos += videos;
            deleted.objects += pay(&ctx.storage, &ctx.db, owed).await;
        }
        while let Some((videos, owed)) = delete_recording_page(ctx, user).await? {
            deleted.transactions += 1;
            deleted.videos += videos;
            deleted.objects += pay(&ctx.storage, &ctx.db, owed).await;
        }
        while delete_event_page(ctx, user).await? > 0 {
            deleted.transactions += 1;
        }
        if delete_user_row(ctx, user).await? {
            deleted.transactions += 1;
            tracing::info!(
                videos = deleted.videos,
                objects = deleted.objects,
                transactions = deleted.transactions,
                "user deleted"
            );
            return Ok(deleted);
        }
    }
    Err(AppError::BadRequest(
        "the user kept receiving new uploads while being deleted; run the deletion again".into(),
    ))
}

/// Deletes one page of the user's upload contracts with their videos and jobs, listing their
/// objects as owed; returns how many videos and what is owed, or `None` when none is left.
async fn delete_upload_page(
    ctx: &AppContext,
    user: UserId,
) -> Result<Option<(usize, Vec<Doomed>)>, AppError> {
    let mut conn = ctx.db.get().await?;
    conn.transaction::<_, AppError, _>(async |conn| {
        if db::users::lock_for_key_share(conn, user).await?.is_none() {
            return Ok(None);
        }
        let page = db::uploads::lock_page_of_owner(conn, user, DELETE_PAGE).await?;
        if page.is_empty() {
            return Ok(None);
        }
        let (uploads, originals): (Vec<UploadId>, Vec<String>) = page.into_iter().unzip();
        let videos = db::videos::lock_for_uploads(conn, &uploads).await?;
        db::jobs::lock_for_videos(conn, &videos).await?;
        db::uploads::delete_many(conn, &uploads).await?;
        let owed = Debt::of(originals, &videos).owe(conn).await?;
        Ok(Some((videos.len(), owed)))
    })
    .await
}

/// Deletes one page of the user's live recordings with their videos and jobs (lock order
/// users -> videos -> recordings -> jobs), listing their objects as owed; returns how many
/// videos and what is owed, or `None` when none is left.
async fn delete_recording_page(
    ctx: &AppContext,
    user: UserId,
) -> Result<Option<(usize, Vec<Doomed>)>, AppError> {
    let mut conn = ctx.db.get().await?;
    conn.transaction::<_, AppError, _>(async |conn| {
        if db::users::lock_for_key_share(conn, user).await?.is_none() {
            return Ok(None);
        }
        let recordings = db::recordings::videos::page_of_owner(conn, user, DELETE_PAGE).await?;
        if recordings.is_empty() {
            return Ok(None);
        }
        let videos = db::videos::lock_for_recordings(conn, &recordings).await?;
        db::recordings::videos::delete_recordings(conn, &recordings).await?;
        let mut debt = Debt::of(Vec::new(), &videos);
        debt.prefixes.extend(
            recordings
                .iter()
                .map(|r| crate::domain::recording::files_prefix(*r)),
        );
        Ok(Some((videos.len(), debt.owe(conn).await?)))
    })
    .await
}

/// Deletes one page of the user's events with their deliveries; returns how many events.
async fn delete_event_page(ctx: &AppContext, user: UserId) -> Result<usize, AppError> {
    let mut conn = ctx.db.get().await?;
    conn.transaction::<_, AppError, _>(async |conn| {
        if db::users::lock_for_key_share(conn, user).await?.is_none() {
            return Ok(0);
        }
        Ok(db::deliveries::delete_page_of_owner(conn, user, DELETE_PAGE).await?)
    })
    .await
}

/// Deletes the user row (its endpoints, and any event committed since the last page, cascade)
/// unless an upload arrived meanwhile; returns whether it did.
async fn delete_user_row(ctx: &AppContext, user: UserId) -> Result<bool, AppError> {
    let mut conn = ctx.db.get().await?;
    conn.transaction::<_, AppError, _>(async |conn| {
        if db::users::lock_for_update(conn, user).await?.is_none() {
            // Another deletion finished first.
            return Ok(true);
        }
        if db::uploads::any_of_owner(conn, user).await?
            || !db::recordings::videos::page_of_owner(conn, user, 1)
                .await?
                .is_empty()
        {
            return Ok(false);
        }
        db::deliveries::lock_of_owner(conn, user).await?;
        db::users::delete(conn, user).await?;
        Ok(true)
    })
    .await
}
