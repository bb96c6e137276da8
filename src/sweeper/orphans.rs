//! The orphan pass: one sweeper at a time (a session advisory lock) removes spool files no
//! ledger row owns and ledger rows whose spool file is gone, after their grace; deletes the
//! objects no live row owns, and aborts the multipart uploads left open on keys no live row
//! owns (a worker killed mid-upload in its job's last attempt, or whose video failed or went).

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Shared, SweepStore};
use crate::app::AppError;
use crate::db::{self};
use crate::sync::Locked;

/// The session advisory lock one sweeper holds while it runs the orphan pass.
pub const ORPHAN_PASS_LOCK: i64 = 7_271_015;

/// What one orphan pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanPass {
    /// Objects listed under vidq's four prefixes (`app::reconcile::PREFIXES`).
    pub objects: usize,
    /// Orphans deleted (past the grace period).
    pub deleted: usize,
    /// Dead attempts' `pending` artifact rows forgotten.
    pub dead_pending_rows: usize,
    /// Objects no row owns that are younger than the grace period (left alone).
    pub young: usize,
    /// Multipart uploads aborted: begun past the grace period on a key no live row owns.
    pub multiparts_aborted: usize,
}

impl<S: SweepStore> Shared<S> {
    pub(super) async fn clean_orphans(&self) -> Result<Option<OrphanPass>, AppError> {
        let allowed = self
            .orphans_allowed
            .locked()
            .load(std::sync::atomic::Ordering::SeqCst);
        if !allowed {
            tracing::info!("no orphan pass yet: the bucket's deployment marker is not checked");
            return Ok(None);
        }
        let mut conn = self.pool.get().await?;
        if !db::session::try_advisory_lock(&mut conn, ORPHAN_PASS_LOCK).await? {
            tracing::debug!("another sweeper runs the orphan pass");
            return Ok(None);
        }
        let pass = self.orphan_pass(&mut conn).await;
        // The lock is the session's: give it back before the connection returns to the pool.
        if let Err(error) = db::session::advisory_unlock(&mut conn, ORPHAN_PASS_LOCK).await {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "could not release the orphan pass lock");
        }
        pass.map(Some)
    }

    pub(super) async fn orphan_pass(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
    ) -> Result<OrphanPass, AppError> {
        let started = Instant::now();
        let grace = self.settings.orphan_grace;
        // The ledger first, then the listing (see `app::reconcile`).
        let snapshot = db::reconcile::snapshot(conn).await?;
        let mut objects = Vec::new();
        for prefix in crate::app::reconcile::PREFIXES {
            let listed = self.store.list(prefix).await?;
            objects.extend(
                listed
                    .into_iter()
                    .map(crate::domain::reconcile::BucketObject::from),
            );
        }
        let report = crate::app::reconcile::compare_snapshot(
            &snapshot,
            &objects,
            chrono::Utc::now(),
            grace.as_secs(),
        )?;
        let mut deleted = Vec::new();
        for orphan in report
            .differences
            .iter()
            .filter(|d| d.kind == crate::domain::reconcile::Kind::Orphan)
        {
            match self.store.delete(&orphan.key).await {
                Ok(()) => {
                    tracing::info!(key = %orphan.key, reason = %orphan.reason, "orphan object deleted");
                    deleted.push(orphan.key.clone());
                }
                Err(error) => {
                    tracing::warn!(key = %orphan.key, error = %crate::telemetry::error_chain(&error), "could not delete an orphan object");
                }
            }
        }
        db::artifacts::forget_keys(conn, &deleted).await?;
        let multiparts_aborted = self.abort_orphaned_multiparts(&snapshot, grace).await?;
        let forgotten = db::artifacts::forget_dead_pending(conn, grace.as_secs_f64()).await?;
        self.stats
            .orphans_deleted
            .fetch_add(deleted.len() as u64, Ordering::Relaxed);
        self.stats
            .dead_pending_forgotten
            .fetch_add(forgotten as u64, Ordering::Relaxed);
        let pass = OrphanPass {
            objects: objects.len(),
            deleted: deleted.len(),
            dead_pending_rows: forgotten,
            young: report.young,
            multiparts_aborted,
        };
        tracing::info!(
            listed = pass.objects,
            deleted = pass.deleted,
            dead_pending_rows = pass.dead_pending_rows,
            young = pass.young,
            multiparts_aborted = pass.multiparts_aborted,
            ms = started.elapsed().as_millis() as u64,
            "orphan pass done"
        );
        Ok(pass)
    }

    /// Aborts the multipart uploads under `videos/` whose key the ledger judges an orphan, as
    /// an object at that key would be (the same snapshot, read before the listing), and that
    /// began past the grace period; one whose start the listing does not give is left alone.
    async fn abort_orphaned_multiparts(
        &self,
        snapshot: &db::reconcile::LedgerSnapshot,
        grace: std::time::Duration,
    ) -> Result<usize, AppError> {
        let open = self.store.open_multiparts("videos/").await?;
        if open.is_empty() {
            return Ok(0);
        }
        let now = chrono::Utc::now();
        let as_objects: Vec<crate::domain::reconcile::BucketObject> = open
            .iter()
            .map(|upload| crate::domain::reconcile::BucketObject {
                key: upload.key.clone(),
                size: 0,
                // Unknown: as new as now, so the grace period keeps it.
                last_modified: upload.initiated.unwrap_or(now),
                sha256: crate::domain::reconcile::StoredDigest::Unread,
            })
            .collect();
        let report =
            crate::app::reconcile::compare_snapshot(snapshot, &as_objects, now, grace.as_secs())?;
        let orphaned: std::collections::HashSet<&str> = report
            .differences
            .iter()
            .filter(|d| d.kind == crate::domain::reconcile::Kind::Orphan)
            .map(|d| d.key.as_str())
            .collect();
        let mut aborted = 0;
        for upload in open.iter().filter(|u| orphaned.contains(u.key.as_str())) {
            match self.store.abort_multipart(&upload.key, &upload.id).await {
                Ok(()) => {
                    aborted += 1;
                    tracing::info!(key = %upload.key, "orphaned multipart upload aborted");
                }
                Err(error) => tracing::warn!(key = %upload.key,
                    error = %crate::telemetry::error_chain(&error),
                    "could not abort an orphaned multipart upload"),
            }
        }
        Ok(aborted)
    }
}
