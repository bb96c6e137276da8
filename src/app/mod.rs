//! Use-cases: one function per transaction, called by HTTP handlers, roles and admin
//! commands alike. Each loads, checks, writes in one transaction, and touches S3 only
//! outside it (invariant I7).

pub mod auth;
pub mod confirm_batch;
pub mod deployment_marker;
pub mod doomed;
mod error;
pub mod events;
pub mod ingest;
pub mod ingest_s3;
pub mod live;
pub mod live_files;
pub mod live_videos;
pub mod login_throttle;
pub mod open_work;
pub mod operators;
pub mod playback;
pub mod reconcile;
pub mod status_reads;
pub mod upload_locks;
pub mod uploads;
pub mod users;
pub mod videos;
pub mod webhooks;

use crate::adapters::storage::Storage;
use crate::config::UploadConfig;
use crate::db::DbPool;

/// What every use-case needs: the database, the bucket and the upload limits.
#[derive(Clone, Debug)]
pub struct AppContext {
    /// Connection pool.
    pub db: DbPool,
    /// The bucket.
    pub storage: Storage,
    /// Upload limits and URL lifetimes.
    pub upload: UploadConfig,
    /// Where webhooks may point.
    pub webhooks: crate::config::WebhookArgs,
    /// Ticks when an outbox row may have committed (long-polling feed readers wait on it).
    pub events: events::EventSignal,
    /// How playback URLs are made and playback tokens checked.
    pub playback: playback::PlaybackSettings,
    /// Where this node spools uploads through vidq (`None`: this process takes none).
    pub ingest: Option<ingest::Ingest>,
    /// Who may open the operator dashboard.
    pub operators: operators::OperatorAccess,
    /// Where confirms wait for their transaction (group commit).
    pub confirms: confirm_batch::ConfirmBatcher,
    /// Where status reads wait for their statement (reads in groups).
    pub status_reads: status_reads::StatusReads,
    /// A worker running in this same process (`vidq dev`), whose families the API's
    /// `/metrics` serves too: there it has no health listener of its own to scrape.
    pub in_process_worker: Option<InProcessWorker>,
    /// `VIDQ_READY_REQUIRES_STORAGE`: `/readyz` is 503 unless the bucket answers too.
    pub ready_requires_storage: bool,
    /// The API key the upload page at `/` comes filled in with: `vidq dev` makes one for
    /// its run; a deployed API fills in none.
    pub page_key: Option<String>,
}

/// A worker sharing the API's process: its own account of itself and its slot count.
#[derive(Clone, Debug)]
pub struct InProcessWorker {
    /// What the worker's runner records.
    pub health: std::sync::Arc<crate::telemetry::worker_health::WorkerHealth>,
    /// `VIDQ_SLOTS`.
    pub slots: u32,
}

pub use error::{AppError, LiveFileError, ReceiveError, UploadError, WebhookError};
