//! Paying what a deletion owes the bucket. The deleting transaction lists the objects
//! ([`db::doomed_objects::owe`]); right after it commits, the API deletes them and crosses
//! each off. What S3 does not delete now (an outage, a timeout) stays listed, and a sweeper
//! deletes it later (`sweeper::doomed`): an object outlives its rows by one sweep, never
//! until the orphan pass hours later.

use crate::adapters::storage::Storage;
use crate::db::{self, DbPool, doomed_objects::Doomed};
use crate::domain::ids::VideoId;
use crate::domain::keys;

/// What a deletion owes: originals (single keys), and video and recording prefixes.
#[derive(Debug, Default)]
pub struct Debt {
    /// Single objects (originals).
    pub keys: Vec<String>,
    /// Prefixes (a video's outputs, a recording's files).
    pub prefixes: Vec<String>,
}

impl Debt {
    /// The originals and every object under the videos' prefixes.
    pub fn of(originals: Vec<String>, videos: &[VideoId]) -> Self {
        Self {
            keys: originals,
            prefixes: videos.iter().map(|v| keys::video_prefix(*v)).collect(),
        }
    }

    /// Lists it as owed, in the deleting transaction.
    pub async fn owe(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
    ) -> diesel::QueryResult<Vec<Doomed>> {
        db::doomed_objects::owe(conn, &self.keys, &self.prefixes).await
    }
}

/// Deletes each owed object or prefix and crosses it off; returns how many objects went.
/// A failure is logged and left listed for a sweeper.
pub async fn pay(storage: &Storage, pool: &DbPool, owed: Vec<Doomed>) -> usize {
    let mut deleted = 0;
    for doomed in owed {
        let gone = if doomed.is_prefix {
            storage.delete_prefix(&doomed.key).await
        } else {
            storage.delete(&doomed.key).await.map(|()| 1)
        };
        match gone {
            Ok(n) => {
                deleted += n;
                if let Err(error) = cross_off(pool, doomed.id).await {
                    tracing::warn!(key = %doomed.key, error = %crate::telemetry::error_chain(&error),
                        "deleted, but could not cross it off the list; a sweeper deletes it again");
                }
            }
            Err(error) => {
                let chain = crate::telemetry::error_chain(&error);
                tracing::warn!(key = %doomed.key, error = %chain,
                    "could not delete a deleted video's object now; a sweeper deletes it once S3 answers");
                if let Ok(mut conn) = pool.get().await {
                    let _ = db::doomed_objects::failed(&mut conn, doomed.id, &chain).await;
                }
            }
        }
    }
    deleted
}

async fn cross_off(pool: &DbPool, id: i64) -> Result<(), db::DbError> {
    let mut conn = pool.get().await?;
    db::doomed_objects::paid(&mut conn, id).await?;
    Ok(())
}
