//! How a claim-dependent transaction can fail ([`JobError`]), which of those failures a new
//! try gets past, and the helpers every fenced transaction shares: the uploader's lock
//! first, and a fence that matches nothing rolling everything back.

use diesel_async::AsyncPgConnection;

use crate::db::{self, DbError, jobs::AttemptEnd};
use crate::domain::ids::{UserId, VideoId};
use crate::domain::job::Outcome;

/// Why a claim-dependent transaction changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The claim is no longer ours (lease expired and reclaimed, cancelled, video deleted):
    /// the transaction was rolled back whole.
    #[error("the claim was lost; nothing was written")]
    ClaimLost,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
    /// The task running the transaction ended without an answer (it panicked): whether it
    /// committed is unknown, and the lease decides.
    #[error("the transaction's task ended without an answer")]
    Unanswered,
}

impl From<diesel::result::Error> for JobError {
    fn from(err: diesel::result::Error) -> Self {
        Self::Database(DbError::Query(err))
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for JobError {
    fn from(err: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        Self::Database(DbError::Pool(err))
    }
}

/// Takes the uploader's lock (`FOR KEY SHARE`: it blocks the user's deletion but not the
/// user's other finalizations), the first lock of every path. `ClaimLost` if the video or its
/// owner is gone.
pub(crate) async fn lock_owner(
    conn: &AsyncPgConnection,
    video: VideoId,
) -> Result<UserId, JobError> {
    db::users::lock_owner_of_video(conn, video)
        .await?
        .ok_or(JobError::ClaimLost)
}

/// Fails with [`JobError::ClaimLost`] (rolling back) when the fence matched nothing.
pub(crate) fn fenced(rows: usize) -> Result<(), JobError> {
    if rows == 0 {
        Err(JobError::ClaimLost)
    } else {
        Ok(())
    }
}

/// A video row that vanished under a finalize (deleted with its video) is a lost claim.
pub(crate) fn video_gone(err: diesel::result::Error) -> JobError {
    match err {
        diesel::result::Error::NotFound => JobError::ClaimLost,
        other => other.into(),
    }
}

/// How an attempt ended, with the error's code and its public message (the log has the rest).
pub(crate) fn end<'a>(outcome: Outcome, error: Option<(&'a str, &'a str)>) -> AttemptEnd<'a> {
    AttemptEnd { outcome, error }
}

/// Whether `err` is a database failure that a new try of the same transaction, on a fresh
/// connection if need be, can get past.
pub(crate) fn is_transient(err: &JobError) -> bool {
    use diesel::result::{DatabaseErrorKind as Kind, Error};
    use diesel_async::pooled_connection::PoolError;
    match err {
        JobError::Database(DbError::Query(query)) if db::connection_lost(query) => true,
        JobError::Database(DbError::Query(query)) => match query {
            Error::DatabaseError(Kind::SerializationFailure, _)
            | Error::RollbackErrorOnCommit { .. } => true,
            // diesel names no kind for 40P01; PostgreSQL's message is stable.
            Error::DatabaseError(Kind::Unknown, info) => {
                info.message().starts_with("deadlock detected")
            }
            _ => false,
        },
        // A new connection could not be opened (the server restarting); a checkout that
        // timed out already waited 10 s and is not retried.
        JobError::Database(DbError::Pool(bb8::RunError::User(PoolError::ConnectionError(_)))) => {
            true
        }
        _ => false,
    }
}

/// Whether `err` says the database was out of reach, not that the transaction conflicted.
pub(crate) fn unavailable(err: &JobError) -> bool {
    matches!(err, JobError::Database(db) if db.is_unavailable())
}

#[cfg(test)]
mod tests {
    use diesel::result::{DatabaseErrorKind as Kind, Error};

    use super::*;

    fn failed(kind: Kind, message: &str) -> JobError {
        JobError::Database(DbError::Query(Error::DatabaseError(
            kind,
            Box::new(message.to_owned()),
        )))
    }

    #[test]
    fn only_failures_that_pass_are_tried_again() {
        for passing in [
            failed(Kind::SerializationFailure, "could not serialize access"),
            failed(Kind::Unknown, "deadlock detected"),
            failed(
                Kind::Unknown,
                "terminating connection due to administrator command",
            ),
            failed(Kind::UnableToSendCommand, "connection closed"),
            failed(Kind::ClosedConnection, "server closed the connection"),
        ] {
            assert!(is_transient(&passing), "{passing:?}");
        }
        for lasting in [
            failed(Kind::UniqueViolation, "duplicate key value"),
            failed(Kind::CheckViolation, "attempt_count"),
            failed(Kind::Unknown, "relation \"videos\" does not exist"),
            JobError::ClaimLost,
        ] {
            assert!(!is_transient(&lasting), "{lasting:?}");
        }
    }
}
