//! The worker engine: claim jobs from PostgreSQL ([`claim`]), run each under a heartbeat
//! lease ([`runner`]), and end every attempt through the fenced transactions behind
//! [`complete::Completer`]. The distribution across nodes is the race itself: the next idle
//! node claims the next row first, and [`line`] keeps idle nodes from all racing for the
//! same one. Operators' retry and cancel ([`operator`]) and the [`reaper`] live here too.

pub mod claim;
pub mod claim_ahead;
pub mod complete;
pub mod error;
pub mod heartbeat;
pub mod line;
pub mod listener;
pub mod operator;
pub mod reaper;
pub mod runner;
mod slot;

pub use claim::{Claim, NextClaim, TimeSince};
pub use error::JobError;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::domain::ids::VideoId;
use crate::domain::media::MediaError;
use crate::pipeline::{AttemptPlan, Attempted, Pipeline};

/// The work one attempt does between its claim and its finalize. The real body is the media
/// [`Pipeline`]; queue tests and the queue benchmark plug in bodies that block, fail or
/// succeed on command.
pub trait JobBody: Send + Sync + 'static {
    /// Runs one attempt; must stop promptly once `cancel` fires.
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Attempted, MediaError>>;

    /// Whether this node's media tools work now (tried again while they count as broken).
    fn check_tools(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    /// After a READY commit: remove what the video's other attempts and runs left behind.
    /// `dead` lists the prefixes the READY transaction owed the bucket.
    fn after_ready(
        &self,
        _video: VideoId,
        _live_run: i32,
        _live_attempt: i32,
        _dead: Vec<String>,
    ) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

impl JobBody for Pipeline {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Attempted, MediaError>> {
        Box::pin(Pipeline::run(self, plan, cancel))
    }

    fn check_tools(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(crate::adapters::ffmpeg::check::tools_work(
            &self.media,
            &self.work_root,
        ))
    }

    fn after_ready(
        &self,
        video: VideoId,
        live_run: i32,
        live_attempt: i32,
        dead: Vec<String>,
    ) -> BoxFuture<'_, ()> {
        Box::pin(self.remove_superseded(video, live_run, live_attempt, dead))
    }
}
