//! A job body for queue tests: every attempt does what the test chose (succeed, fail, or
//! block until stopped) and the body records how many attempts of a video overlap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use vidq::domain::ids::VideoId;
use vidq::domain::media::MediaError;
use vidq::pipeline::{AttemptOutput, AttemptPlan};
use vidq::queue::JobBody;

#[derive(Clone, Debug)]
pub enum Step {
    /// Succeed after this long.
    Succeed(Duration),
    /// Fail with this error after a moment.
    Fail(MediaError),
    /// Run until stopped, then report the stop.
    Block,
}

#[derive(Default)]
pub struct Scripted {
    default: Mutex<Option<Step>>,
    active: Mutex<HashMap<VideoId, u32>>,
    /// Most attempts of one video seen running at once.
    pub max_overlap: Mutex<u32>,
    /// Every (video, attempt) started.
    pub started: Mutex<Vec<(VideoId, i32)>>,
}

impl Scripted {
    pub fn new(default: Step) -> Arc<Self> {
        let body = Self::default();
        *body.default.lock().unwrap() = Some(default);
        Arc::new(body)
    }

    fn next(&self) -> Step {
        self.default.lock().unwrap().clone().expect("a step")
    }
}

pub fn output(plan: &AttemptPlan) -> AttemptOutput {
    AttemptOutput::placeholder(plan)
}

impl JobBody for Scripted {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<vidq::pipeline::Attempted, MediaError>> {
        Box::pin(async move {
            {
                let mut active = self.active.lock().unwrap();
                let n = active.entry(plan.video).or_default();
                *n += 1;
                let mut max = self.max_overlap.lock().unwrap();
                *max = (*max).max(*n);
                self.started
                    .lock()
                    .unwrap()
                    .push((plan.video, plan.attempt));
            }
            let result = match self.next() {
                Step::Succeed(after) => tokio::select! {
                                    () = tokio::time::sleep(after) => Ok(output(plan)),
                                    () = cancel.cancelled() => Err(MediaError::retryable(
                vidq::domain::failure::FailureCode::Cancelled, "stopped")),
                                },
                Step::Fail(error) => {
                    // An attempt takes a moment even to fail.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Err(error)
                }
                Step::Block => {
                    cancel.cancelled().await;
                    Err(MediaError::retryable(
                        vidq::domain::failure::FailureCode::Cancelled,
                        "stopped",
                    ))
                }
            };
            *self.active.lock().unwrap().get_mut(&plan.video).unwrap() -= 1;
            result.map(Into::into)
        })
    }
}
