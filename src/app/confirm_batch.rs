//! Group commit for the API's confirms: confirms whose HEAD has answered while a batch is
//! being committed wait in a queue and go together in the next one, each still atomic
//! (invariant I1) and answered on its own.
//!
//! A confirm's transaction is a handful of small writes, and on a busy node most of its cost
//! is not the rows but the statements and the commit around them: each statement is parsed,
//! bound, planned and started by PostgreSQL, each commit waits for its WAL flush, and each
//! round trip wakes a task and a backend. [`crate::app::uploads::accept_all`] does the same
//! writes for many confirms in the same number of statements and round trips as one.
//!
//! Nothing waits for a batch to fill: a committer takes whatever is queued when it is free
//! ([`crate::batching`]), so a confirm on a quiet node goes alone and at once (through
//! [`accept`]'s single-row statements), and batches grow only while the committers are busy
//! (the queue is the backlog PostgreSQL could not keep up with anyway).
//! A batch that fails as a whole (a constraint one of its confirms broke, a lost connection)
//! is retried confirm by confirm through [`crate::app::uploads::accept`], so one bad confirm
//! costs the others nothing but time, and each gets its own answer.

use super::AppError;
use super::uploads::{Accepted, accept, accept_all};
use crate::batching::{Groups, Waiting};
use crate::db::DbPool;
use crate::domain::ids::{UploadId, UserId};

/// One confirm that passed its checks (owner, state, HEAD, size) and waits for its
/// transaction.
#[derive(Debug, Clone)]
pub struct Acceptance {
    /// The uploader.
    pub owner: UserId,
    /// The contract to move to `confirmed`.
    pub upload_id: UploadId,
    /// Its object, the new job's input.
    pub object_key: String,
}

/// What [`accept`] answers: the new video and job, `None` when another confirm made them.
pub type AcceptOutcome = Result<Option<Accepted>, AppError>;

/// How confirms are grouped (`VIDQ_CONFIRM_BATCH_MAX`, `VIDQ_CONFIRM_COMMITTERS`).
#[derive(Debug, Clone, Copy)]
pub struct BatchSettings {
    /// Most confirms in one transaction; 1 commits each on its own.
    pub max: usize,
    /// Batches in flight at once, each on a pooled connection of its own.
    pub committers: usize,
}

impl From<&crate::config::UploadConfig> for BatchSettings {
    fn from(upload: &crate::config::UploadConfig) -> Self {
        Self {
            max: usize::from(upload.confirm_batch_max),
            committers: usize::from(upload.confirm_committers),
        }
    }
}

/// The queue in front of the committers. Cloning shares it.
#[derive(Clone, Debug)]
pub struct ConfirmBatcher {
    committers: Groups<Acceptance, AcceptOutcome>,
}

impl ConfirmBatcher {
    /// Starts `settings.committers` committer tasks on the current runtime. They end when
    /// the last clone of the batcher is dropped, after answering what was queued.
    pub fn start(db: DbPool, settings: BatchSettings) -> Self {
        let (max, committers) = (settings.max.max(1), settings.committers.max(1));
        let committers = Groups::start(committers, max, max * committers * 4, move |batch| {
            let db = db.clone();
            async move { commit(&db, batch).await }
        });
        Self { committers }
    }

    /// Queues `acceptance` for the next batch and waits for its transaction's answer.
    pub async fn accept(&self, acceptance: Acceptance) -> AcceptOutcome {
        // The committer answers every confirm it took, even when its batch failed; no
        // answer means its task died (a panic), and nothing is known of the confirm, which
        // the client may repeat.
        self.committers
            .submit(acceptance)
            .await
            .map_err(|_| AppError::ConfirmsStopped)?
    }
}

#[tracing::instrument(name = "confirm_batch", skip_all, fields(size = batch.len()))]
async fn commit(db: &DbPool, mut batch: Vec<Waiting<Acceptance, AcceptOutcome>>) {
    crate::metrics::CONFIRM_BATCH_SIZE.observe(batch.len() as f64);
    if batch.len() == 1 {
        // Alone, a confirm takes the single-row statements: through the array forms, one
        // confirm at a time measured about a sixth slower than before batches.
        let waiting = batch.pop().expect("one confirm");
        let _ = waiting.answer.send(accept_alone(db, &waiting.item).await);
        return;
    }
    let acceptances: Vec<Acceptance> = batch.iter().map(|w| w.item.clone()).collect();
    let together = async {
        let mut conn = db.get().await?;
        accept_all(&mut conn, &acceptances).await
    }
    .await;
    match together {
        Ok(outcomes) => {
            for (waiting, outcome) in batch.into_iter().zip(outcomes) {
                // A confirm whose client went away is committed all the same; a repeat
                // finds its video.
                let _ = waiting.answer.send(outcome);
            }
        }
        Err(error) => {
            tracing::warn!(
                error = %crate::telemetry::error_chain(&error),
                "a batch of confirms failed as a whole; committing each on its own"
            );
            for waiting in batch {
                let _ = waiting.answer.send(accept_alone(db, &waiting.item).await);
            }
        }
    }
}

/// One confirm in a transaction of its own ([`accept`]).
async fn accept_alone(db: &DbPool, acceptance: &Acceptance) -> AcceptOutcome {
    let mut conn = db.get().await?;
    accept(
        &mut conn,
        acceptance.owner,
        acceptance.upload_id,
        &acceptance.object_key,
    )
    .await
}
