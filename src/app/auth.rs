//! Who is calling: API keys are looked up by their hash.

use uuid::Uuid;

use super::AppError;
use crate::db::{self, DbPool};
use crate::domain::api_key::hash_presented_key;
use crate::domain::ids::UserId;

/// The user holding `presented_key`; `Unauthorized` for a key nobody holds.
pub async fn authenticate(pool: &DbPool, presented_key: &str) -> Result<UserId, AppError> {
    let hash = hash_presented_key(presented_key);
    let mut conn = pool.get().await?;
    let user: Option<Uuid> = db::users::find_by_key_hash(&mut conn, &hash).await?;
    user.map(UserId).ok_or(AppError::Unauthorized)
}
