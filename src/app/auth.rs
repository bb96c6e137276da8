//! Who is calling: API keys are looked up by their hash.

use diesel::QueryResult;
use diesel_async::AsyncPgConnection;

use super::AppError;
use crate::db::{self, DbPool};
use crate::domain::api_key::hash_presented_key;
use crate::domain::ids::UserId;

/// The user holding `presented_key`; `Unauthorized` for a key nobody holds.
pub async fn authenticate(pool: &DbPool, presented_key: &str) -> Result<UserId, AppError> {
    let hash = hash_presented_key(presented_key);
    let mut conn = pool.get().await?;
    let user = db::users::find_by_key_hash(&mut conn, &hash).await?;
    user.ok_or(AppError::Unauthorized)
}

/// What `read` finds for the holder of `presented_key`, with the key's lookup inside the
/// read's own statement (`read` gets the key's hash): one round trip for the paths clients
/// call most. A miss asks once more which failed: `Unauthorized` for a key nobody holds,
/// `NotFound` for a row that is missing or someone else's.
pub async fn read_with_key<T>(
    pool: &DbPool,
    presented_key: &str,
    read: impl AsyncFnOnce(&mut AsyncPgConnection, &[u8]) -> QueryResult<Option<T>>,
) -> Result<T, AppError> {
    let hash = hash_presented_key(presented_key);
    let found = {
        let mut conn = pool.get().await?;
        read(&mut conn, &hash).await?
    };
    match found {
        Some(found) => Ok(found),
        None => Err(explain_miss(pool, presented_key).await),
    }
}

/// Why a read with `presented_key` in its statement found nothing: `Unauthorized` for a
/// key nobody holds, otherwise `NotFound` (a row that is missing or someone else's).
pub async fn explain_miss(pool: &DbPool, presented_key: &str) -> AppError {
    match authenticate(pool, presented_key).await {
        Ok(_) => AppError::NotFound,
        Err(error) => error,
    }
}
