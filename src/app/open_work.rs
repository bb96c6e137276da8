//! Per-user caps on unfinished work: uploads not yet turned into videos (or refused, or
//! expired) and live recordings not yet ended. One key must not be able to fill the
//! database and the spool with work it never finishes; past the cap a create answers 429,
//! naming the limit, and the caller finishes (or lets expire) what it has open first.
//!
//! The count and the insert are not one statement: creates racing from one key may pass
//! the cap by as many as run at once, which a cap against runaway clients allows.

use crate::db::{self, DbPool};
use crate::domain::ids::UserId;

use super::AppError;

/// What kind of open work hit its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenWork {
    /// Uploads `receiving`, `pending` or `uploaded`.
    Uploads,
    /// Recordings `waiting`, `live` or `ending`.
    Recordings,
}

impl OpenWork {
    /// The setting that holds the cap.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Uploads => "VIDQ_MAX_OPEN_UPLOADS_PER_USER",
            Self::Recordings => "VIDQ_MAX_OPEN_RECORDINGS_PER_USER",
        }
    }

    /// What is open, in words.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Uploads => "unfinished uploads",
            Self::Recordings => "open live recordings",
        }
    }
}

/// Passes when `owner` may start another upload ([`admit`] with the upload cap).
pub async fn admit_upload(ctx: &super::AppContext, owner: UserId) -> Result<(), AppError> {
    let cap = ctx.upload.max_open_uploads_per_user;
    admit(&ctx.db, owner, OpenWork::Uploads, cap).await
}

/// Passes when `owner` has fewer than `cap` open items of `kind`.
pub async fn admit(db: &DbPool, owner: UserId, kind: OpenWork, cap: u32) -> Result<(), AppError> {
    let mut conn = db.get().await?;
    let open = match kind {
        OpenWork::Uploads => db::uploads::open_of_owner(&mut conn, owner.0, cap).await?,
        OpenWork::Recordings => db::recordings::open_of_owner(&mut conn, owner.0, cap).await?,
    };
    if open >= i64::from(cap) {
        return Err(AppError::TooManyOpen { kind, cap });
    }
    Ok(())
}
