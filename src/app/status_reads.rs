//! Status reads in groups: `GET /v1/videos/{id}` calls that arrive while a read statement is
//! out wait in a queue and are answered together by the next one, each checked against its
//! own caller's key and answered on its own.
//!
//! A status read is one indexed lookup, and on a busy node most of its cost is not the row
//! but what surrounds it: a pooled connection to take, a statement for PostgreSQL to bind
//! and start, a round trip that wakes a task and a backend. Here N reads share one of each
//! ([`db::videos::find_many_with_key_hash`]).
//!
//! Nothing waits for a batch to fill: a reader takes whatever is queued when it is free
//! ([`crate::batching`]), so a read on a quiet node goes alone and at once, through the
//! single-row statement that checks the key in SQL. A batch's statement starts after every read in it arrived, so
//! each read still sees everything committed before its request came in. A batch that
//! fails as a whole is read again call by call, so each gets its own answer or error.

use std::collections::HashMap;

use crate::batching::{Groups, Waiting};
use crate::db::videos::VideoWithAttempts;
use crate::db::{self, DbError, DbPool};
use crate::domain::ids::VideoId;

/// Statements in flight at once, each on a pooled connection of its own: two keep both of
/// PostgreSQL's backends busy while the API parses the next requests.
const READERS: usize = 2;
/// Most reads one statement answers.
const MOST_IN_ONE: usize = 64;

/// What a read answers: the video, `None` if it is missing or not the key holder's.
pub type ReadOutcome = Result<Option<VideoWithAttempts>, DbError>;

/// One caller's read: the hash of the key it came with, and the video it asks for.
#[derive(Debug)]
struct Read {
    key_hash: [u8; 32],
    video: VideoId,
}

/// The queue in front of the readers. Cloning shares it.
#[derive(Clone, Debug)]
pub struct StatusReads {
    db: DbPool,
    readers: Groups<Read, ReadOutcome>,
}

impl StatusReads {
    /// Starts the reader tasks on the current runtime. They end when the last clone is
    /// dropped, after answering what was queued.
    pub fn start(db: DbPool) -> Self {
        let readers = Groups::start(READERS, MOST_IN_ONE, MOST_IN_ONE * READERS * 4, {
            let db = db.clone();
            move |batch| {
                let db = db.clone();
                async move { answer(&db, batch).await }
            }
        });
        Self { db, readers }
    }

    /// The video `video` if the holder of the key hashed to `key_hash` owns it.
    pub async fn read(&self, key_hash: [u8; 32], video: VideoId) -> ReadOutcome {
        match self.readers.submit(Read { key_hash, video }).await {
            Ok(outcome) => outcome,
            // The readers are gone (the runtime is stopping, or a reader panicked): a read
            // has no side effects, so it is made here instead.
            Err(_) => read_alone(&self.db, &key_hash, video).await,
        }
    }
}

async fn answer(db: &DbPool, mut batch: Vec<Waiting<Read, ReadOutcome>>) {
    crate::metrics::STATUS_READ_BATCH_SIZE.observe(batch.len() as f64);
    if batch.len() == 1 {
        let waiting = batch.pop().expect("one read");
        let outcome = read_alone(db, &waiting.item.key_hash, waiting.item.video).await;
        let _ = waiting.answer.send(outcome);
        return;
    }
    let ids = batch.iter().map(|w| w.item.video).collect();
    let together = async {
        let mut conn = db.get().await?;
        Ok::<_, DbError>(db::videos::find_many_with_key_hash(&mut conn, ids).await?)
    }
    .await;
    match together {
        Ok(rows) => {
            let by_id: HashMap<VideoId, (VideoWithAttempts, Vec<u8>)> =
                rows.into_iter().map(|row| (row.0.0.id, row)).collect();
            for waiting in batch {
                // Someone else's video reads as a missing one, as in the single-row
                // statement, whose `WHERE` compares the same two hashes.
                let found = by_id
                    .get(&waiting.item.video)
                    .filter(|(_, owner_hash)| owner_hash.as_slice() == waiting.item.key_hash)
                    .map(|(found, _)| found.clone());
                // A read whose client went away is simply not delivered.
                let _ = waiting.answer.send(Ok(found));
            }
        }
        Err(error) => {
            tracing::warn!(
                error = %crate::telemetry::error_chain(&error),
                size = batch.len(),
                "a batch of status reads failed as a whole; reading each on its own"
            );
            for waiting in batch {
                let outcome = read_alone(db, &waiting.item.key_hash, waiting.item.video).await;
                let _ = waiting.answer.send(outcome);
            }
        }
    }
}

/// One read with the key checked in its own statement.
async fn read_alone(db: &DbPool, key_hash: &[u8], video: VideoId) -> ReadOutcome {
    let mut conn = db.get().await?;
    Ok(db::videos::find_by_key_hash(&mut conn, key_hash, video).await?)
}
