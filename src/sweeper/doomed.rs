//! The objects still owed to the bucket (`db::doomed_objects`): a deleted video's objects and
//! the prefixes a READY superseded. The API or the worker deletes them at once; what S3
//! refused then, or what a process that died first left, is deleted here, by whichever
//! sweeper takes the row first, with a backoff while S3 still refuses.

use super::{Shared, SweepStore};
use crate::db::{self, doomed_objects::Doomed};

/// Rows taken per pass.
const PAGE: i64 = 64;
/// How long a taken row is hidden from other sweepers (longer than a page of deletes).
const HOLD_SECS: f64 = 300.0;

impl<S: SweepStore> Shared<S> {
    /// Deletes a page of owed objects whose try is due; returns how many rows were paid.
    pub(super) async fn pay_doomed(&self) -> Result<usize, db::DbError> {
        let due = {
            let mut conn = self.pool.get().await?;
            db::doomed_objects::take_due(&mut conn, PAGE, HOLD_SECS).await?
        };
        let mut paid = 0;
        for doomed in due {
            match self.delete_doomed(&doomed).await {
                Ok(objects) => {
                    let mut conn = self.pool.get().await?;
                    db::doomed_objects::paid(&mut conn, doomed.id).await?;
                    paid += 1;
                    tracing::info!(key = %doomed.key, objects, "deleted what the bucket was owed");
                }
                Err(error) => {
                    let chain = crate::telemetry::error_chain(&error);
                    tracing::warn!(key = %doomed.key, error = %chain, "an object owed to the bucket is still there; trying again later");
                    let mut conn = self.pool.get().await?;
                    db::doomed_objects::failed(&mut conn, doomed.id, &chain).await?;
                }
            }
        }
        Ok(paid)
    }

    async fn delete_doomed(
        &self,
        doomed: &Doomed,
    ) -> Result<usize, crate::adapters::storage::StorageError> {
        if !doomed.is_prefix {
            self.store.delete(&doomed.key).await?;
            return Ok(1);
        }
        let listed = self.store.list(&doomed.key).await?;
        for object in &listed {
            self.store.delete(&object.key).await?;
        }
        Ok(listed.len())
    }
}
