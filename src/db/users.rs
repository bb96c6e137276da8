//! Uploaders and their hashed API keys.

use chrono::{DateTime, Utc};
use diesel::dsl;
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::schema::users;
use crate::domain::ids::{UserId, VideoId};

/// A `users` row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = users)]
pub struct UserRow {
    /// Primary key.
    pub id: UserId,
    /// Unique, chosen by the operator.
    pub name: String,
    /// SHA-256 of the API key.
    pub api_key_hash: Vec<u8>,
    /// When the user was created.
    pub created_at: DateTime<Utc>,
}

/// The user with this id: the row the locks and the delete below take.
#[dsl::auto_type]
fn by_id(id: UserId) -> _ {
    users::table.filter(users::id.eq(id))
}

/// Inserts a user; a taken name is a unique violation the caller maps.
pub async fn insert(
    conn: &mut AsyncPgConnection,
    id: UserId,
    name: &str,
    api_key_hash: &[u8],
    is_admin: bool,
) -> QueryResult<UserRow> {
    diesel::insert_into(users::table)
        .values((
            users::id.eq(id),
            users::name.eq(name),
            users::api_key_hash.eq(api_key_hash),
            users::is_admin.eq(is_admin),
        ))
        .returning(UserRow::as_returning())
        .get_result(conn)
        .await
}

/// The user holding the key with this hash.
pub async fn find_by_key_hash(
    conn: &mut AsyncPgConnection,
    hash: &[u8],
) -> QueryResult<Option<UserId>> {
    users::table
        .filter(users::api_key_hash.eq(hash))
        .select(users::id)
        .first(conn)
        .await
        .optional()
}

/// Gives the user named `name` the key with this hash (the old key stops opening
/// anything); `None` if no user has that name.
pub async fn replace_key_by_name(
    conn: &mut AsyncPgConnection,
    name: &str,
    api_key_hash: &[u8],
) -> QueryResult<Option<UserId>> {
    diesel::update(users::table.filter(users::name.eq(name)))
        .set(users::api_key_hash.eq(api_key_hash))
        .returning(users::id)
        .get_result(conn)
        .await
        .optional()
}

/// The operator (`is_admin`) holding the key with this hash: their name.
pub async fn find_admin_by_key_hash(
    conn: &mut AsyncPgConnection,
    hash: &[u8],
) -> QueryResult<Option<String>> {
    users::table
        .filter(users::api_key_hash.eq(hash))
        .filter(users::is_admin)
        .select(users::name)
        .first(conn)
        .await
        .optional()
}

/// Whether any operator exists (the dashboard is off until one does, or a token is set).
pub async fn any_admin(conn: &mut AsyncPgConnection) -> QueryResult<bool> {
    diesel::select(diesel::dsl::exists(users::table.filter(users::is_admin)))
        .get_result(conn)
        .await
}

/// Locks the user row against deletion (`FOR KEY SHARE`) without blocking the user's other
/// transactions; the first lock every write path takes. `None` if the user is gone.
pub async fn lock_for_key_share(
    mut conn: &AsyncPgConnection,
    id: UserId,
) -> QueryResult<Option<UserId>> {
    by_id(id)
        .select(users::id)
        .for_key_share()
        .first(&mut conn)
        .await
        .optional()
}

/// [`lock_for_key_share`] for several users at once, in id order (the lock order's rule for
/// rows of one table); returns those that exist.
pub async fn lock_all_for_key_share(
    mut conn: &AsyncPgConnection,
    ids: Vec<UserId>,
) -> QueryResult<Vec<UserId>> {
    let found: Vec<super::UuidRow> = super::prepared::prepared(
        "SELECT id FROM users WHERE id = ANY($1) ORDER BY id FOR KEY SHARE",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(ids)
    .load(&mut conn)
    .await?;
    Ok(found.into_iter().map(|row| UserId(row.id)).collect())
}

/// Locks the user row `FOR NO KEY UPDATE`: the user's own writes that must see each other
/// (the webhook cap's count and insert) queue behind it, while finalizations, which only take
/// `FOR KEY SHARE`, go on. `None` if the user is gone.
pub async fn lock_for_no_key_update(
    conn: &mut AsyncPgConnection,
    id: UserId,
) -> QueryResult<Option<UserId>> {
    by_id(id)
        .select(users::id)
        .for_no_key_update()
        .first(conn)
        .await
        .optional()
}

/// Locks the owner of a video `FOR KEY SHARE` (found through the video in the same
/// statement); `None` if the video or its owner is gone.
pub async fn lock_owner_of_video(
    mut conn: &AsyncPgConnection,
    video: VideoId,
) -> QueryResult<Option<UserId>> {
    #[derive(diesel::QueryableByName)]
    struct Owner {
        #[diesel(sql_type = diesel::sql_types::Uuid)]
        id: Uuid,
    }
    let owner: Option<Owner> = super::prepared::prepared(
        "SELECT u.id FROM users u JOIN videos v ON v.owner_id = u.id WHERE v.id = $1 FOR KEY SHARE OF u",
    )
    .bind::<diesel::sql_types::Uuid, _>(video)
    .get_result(&mut conn)
    .await
    .optional()?;
    Ok(owner.map(|o| UserId(o.id)))
}

/// [`lock_owner_of_video`] for several videos at once: their owners locked `FOR KEY SHARE` in
/// id order (the lock order's rule for rows of one table); returns those found. A video that
/// is gone has no owner to lock, and its job went with it, so the fence of its finalize fails.
pub async fn lock_owners_of_videos(
    mut conn: &AsyncPgConnection,
    videos: Vec<VideoId>,
) -> QueryResult<Vec<UserId>> {
    let found: Vec<super::UuidRow> = super::prepared::prepared(
        "SELECT id FROM users WHERE id IN (SELECT owner_id FROM videos WHERE id = ANY($1))
          ORDER BY id FOR KEY SHARE",
    )
    .bind::<diesel::sql_types::Array<diesel::sql_types::Uuid>, _>(videos)
    .load(&mut conn)
    .await?;
    Ok(found.into_iter().map(|row| UserId(row.id)).collect())
}

/// Replaces the user's key hash with `hash` (of a key nobody holds), found by name, and
/// returns the user: deleting a user starts by shutting them out, so nothing new arrives while
/// their rows are removed page by page. `None` if there is no such user.
pub async fn revoke_key_by_name(
    conn: &mut AsyncPgConnection,
    name: &str,
    hash: &[u8],
) -> QueryResult<Option<UserId>> {
    diesel::update(users::table.filter(users::name.eq(name)))
        .set(users::api_key_hash.eq(hash))
        .returning(users::id)
        .get_result(conn)
        .await
        .optional()
}

/// Locks the user row for deletion (`FOR UPDATE`); `None` if it is gone.
pub async fn lock_for_update(
    conn: &mut AsyncPgConnection,
    id: UserId,
) -> QueryResult<Option<UserId>> {
    by_id(id)
        .select(users::id)
        .for_update()
        .first(conn)
        .await
        .optional()
}

/// Deletes the user; uploads, videos, jobs and outbox rows go with it (ON DELETE CASCADE).
pub async fn delete(conn: &mut AsyncPgConnection, id: UserId) -> QueryResult<usize> {
    diesel::delete(by_id(id)).execute(conn).await
}
