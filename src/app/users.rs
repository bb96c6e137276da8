//! Uploaders: creating one with a fresh API key, and deleting one with everything they own.

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::AsyncConnection;

use super::videos::delete_objects;
use super::{AppContext, AppError};
use crate::db::{self, DbPool};
use crate::domain::api_key::ApiKey;
use crate::domain::ids::{UserId, VideoId};

/// Creates a user and returns the API key, which exists nowhere else after this returns.
pub async fn create_user(db: &DbPool, name: &str) -> Result<(UserId, ApiKey), AppError> {
    let name = name.trim();
    if !(1..=100).contains(&name.chars().count()) || name.chars().any(char::is_control) {
        return Err(AppError::BadRequest(
            "a user name has 1-100 characters and no control characters".to_owned(),
        ));
    }
    let id = UserId::new();
    let key = ApiKey::generate();
    let mut conn = db.get().await?;
    match db::users::insert(&mut conn, id.0, name, &key.hash()).await {
        Ok(_) => Ok((id, key)),
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
            Err(AppError::NameTaken(name.to_owned()))
        }
        Err(err) => Err(err.into()),
    }
}

/// What deleting a user removed.
#[derive(Debug, PartialEq, Eq)]
pub struct DeletedUser {
    /// Videos removed with the user.
    pub videos: usize,
    /// S3 objects removed after the rows.
    pub objects: usize,
}

/// Deletes a user and, by cascade, their uploads, videos, jobs, events, webhooks and
/// deliveries, taking locks in the lock order (`db`) so that no finalizing worker or relay
/// deadlocks with it; then deletes their objects.
#[tracing::instrument(skip_all, fields(user = name))]
pub async fn delete_user(ctx: &AppContext, name: &str) -> Result<DeletedUser, AppError> {
    let mut conn = ctx.db.get().await?;
    let (originals, videos) = conn
        .transaction::<_, AppError, _>(async |conn| {
            let user = db::users::lock_by_name_for_update(conn, name)
                .await?
                .ok_or(AppError::NotFound)?;
            let videos = db::videos::lock_all_of_owner(conn, user).await?;
            db::jobs::lock_for_videos(conn, &videos).await?;
            db::deliveries::lock_of_owner(conn, user).await?;
            let originals = db::uploads::object_keys_of_owner(conn, user).await?;
            db::users::delete(conn, user).await?;
            Ok((originals, videos))
        })
        .await?;
    drop(conn);
    let videos: Vec<VideoId> = videos.into_iter().map(VideoId).collect();
    let objects = delete_objects(ctx, &originals, &videos).await;
    tracing::info!(videos = videos.len(), objects, "user deleted");
    Ok(DeletedUser {
        videos: videos.len(),
        objects,
    })
}
