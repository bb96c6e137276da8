//! Expiry: uploads through vidq that never finished arriving and presigned contracts never
//! confirmed are closed, then their spool files and objects removed.

use std::sync::atomic::Ordering;

use super::{Shared, SweepStore};
use crate::db::{self};

/// Presigned contracts expired per statement.
const EXPIRE_BATCH: i64 = 256;

impl<S: SweepStore> Shared<S> {
    pub(super) async fn expire(&self) -> Result<usize, db::DbError> {
        let unfinished = {
            let mut conn = self.pool.get().await?;
            db::uploads::receiving::expire_receiving(
                &mut conn,
                &self.settings.node_id,
                EXPIRE_BATCH,
            )
            .await?
        };
        for row in &unfinished {
            if let Some(path) = row.spool_path.as_deref()
                && let Err(error) = self.root.remove(path).await
            {
                tracing::warn!(upload_id = %row.id, error = %crate::telemetry::error_chain(&error), "could not remove an expired upload's spool file");
            }
        }
        if !unfinished.is_empty() {
            self.stats
                .expired
                .fetch_add(unfinished.len() as u64, Ordering::Relaxed);
            tracing::info!(
                count = unfinished.len(),
                "expired uploads through vidq that never finished arriving"
            );
        }
        let expired = {
            let mut conn = self.pool.get().await?;
            db::uploads::sweep::expire_presigned(&mut conn, EXPIRE_BATCH).await?
        };
        for row in &expired {
            // The contract is closed first, so no confirm can turn this object into a video
            // once it is gone. A failed delete leaves an orphan for `vidq reconcile`.
            if let Err(error) = self.store.delete(&row.object_key).await {
                tracing::warn!(upload_id = %row.id, error = %crate::telemetry::error_chain(&error), "could not delete an expired upload's object");
            }
        }
        if !expired.is_empty() {
            self.stats
                .expired
                .fetch_add(expired.len() as u64, Ordering::Relaxed);
            tracing::info!(
                count = expired.len(),
                "expired presigned uploads never confirmed"
            );
        }
        Ok(expired.len() + unfinished.len())
    }
}
