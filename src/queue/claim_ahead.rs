//! A freed slot's next claim, sent ahead of its READY finalize in the same flight: the slot
//! hears its next job as soon as the claim statement answers and starts it while the finalize
//! still commits. This is a layer over the claim ([`super::claim`]); the finalize does not
//! know what rides ahead of it ([`super::complete::ready`] sends any autocommitted
//! statements it is given before its `BEGIN`).
//!
//! A slot asks with a [`Rider`] and listens on its [`NextJob`]. The riders of one flight
//! ([`Riders`]; several when a worker's slots finalize together) share one claim statement.
//! The claim does not depend on the finalize: it takes a job whether or not the finalize's
//! fence holds, as a claim of the claim loop would.
//!
//! # Claims and a stop
//!
//! This is the one statement of how claiming and a worker's stop are ordered; the claim loop
//! ([`super::runner`]) and the slots ([`super::slot`]) follow it.
//!
//! 1. The claim loop claims only while the worker is not stopping. It looks at the stop
//!    after it has counted its free slots, so a slot freed by handing its job back at the
//!    stop is always seen together with the stop and never claims again.
//! 2. A slot asks for its next job with its finalize only if the worker is not stopping when
//!    its attempt ends ([`Rider::unless_stopping`]).
//! 3. A job whose claim was already on its way when the stop came is handed back at once,
//!    unstarted, with its attempt restored ([`Heard::AfterStop`]).
//! 4. A job claimed for a slot that no longer listens (its task ended) is handed back at
//!    once too ([`Orphans`]), rather than left to its lease.
//! 5. The stop waits for the finalizes already sent: their results are not lost to a
//!    deploy (`runner::drain`).

use diesel_async::AsyncPgConnection;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::claim::{Claim, NextClaim, claim};
use super::error::JobError;

/// One slot's request for its next job, carried by its finalize's flight.
#[derive(Debug)]
pub struct Rider(oneshot::Sender<Result<Option<Claim>, JobError>>);

/// Where a slot hears what its [`Rider`] found.
#[derive(Debug)]
pub struct NextJob(oneshot::Receiver<Result<Option<Claim>, JobError>>);

impl Rider {
    /// A request and where its answer comes.
    pub fn new() -> (Self, NextJob) {
        let (answer, heard) = oneshot::channel();
        (Self(answer), NextJob(heard))
    }

    /// [`Rider::new`], unless the worker is `stopping` (rule 2 of the module's doc).
    pub fn unless_stopping(stopping: &CancellationToken) -> Option<(Self, NextJob)> {
        (!stopping.is_cancelled()).then(Self::new)
    }
}

/// What a slot heard from its rider.
#[derive(Debug)]
pub enum Heard {
    /// Its next job, to run now.
    Job(Claim),
    /// Nothing was claimable.
    QueueEmpty,
    /// The claim statement failed.
    Failed(JobError),
    /// No claim went out for it (no connection could be had, or another rider of the same
    /// flight got the claim's error): the claim loop looks.
    Nothing,
    /// A job claimed while the worker was stopping: to hand back unstarted (rule 3).
    AfterStop(Claim),
}

impl NextJob {
    /// Waits for the rider's answer; a job that arrives once the worker is `stopping` is
    /// [`Heard::AfterStop`].
    pub async fn heard(self, stopping: &CancellationToken) -> Heard {
        match self.0.await {
            Ok(Ok(Some(job))) if stopping.is_cancelled() => Heard::AfterStop(job),
            Ok(Ok(Some(job))) => Heard::Job(job),
            Ok(Ok(None)) => Heard::QueueEmpty,
            Ok(Err(error)) => Heard::Failed(error),
            Err(_) => Heard::Nothing,
        }
    }
}

/// The riders of one flight, and who claims for them.
#[derive(Debug)]
pub struct Riders<'a> {
    next: NextClaim<'a>,
    riders: Vec<Rider>,
}

/// Jobs claimed for slots that stopped listening, to hand back at once (rule 4).
#[must_use = "a job claimed for nobody is handed back, or it waits out its lease"]
#[derive(Debug, Default)]
pub struct Orphans(pub Vec<Claim>);

impl<'a> Riders<'a> {
    /// `riders`, whose jobs `next` claims.
    pub fn new(next: NextClaim<'a>, riders: impl IntoIterator<Item = Rider>) -> Self {
        Self {
            next,
            riders: riders.into_iter().collect(),
        }
    }

    /// Whether nobody rides (then [`Riders::claim`] sends nothing).
    pub fn is_empty(&self) -> bool {
        self.riders.is_empty()
    }

    /// One claim statement for every rider on `c`, each answered as soon as it answers, in
    /// the riders' order; a failed statement is reported to the first rider, and the others
    /// hear [`Heard::Nothing`]. Returns the jobs claimed for riders nobody listens to any more.
    pub async fn claim(self, c: &AsyncPgConnection) -> Orphans {
        if self.riders.is_empty() {
            return Orphans::default();
        }
        let claimed = claim(c, self.next.node, self.next.lease, self.riders.len()).await;
        let mut orphans = Vec::new();
        match claimed {
            Ok(jobs) => {
                let mut jobs = jobs.into_iter();
                for Rider(answer) in self.riders {
                    if let Err(Ok(Some(orphan))) = answer.send(Ok(jobs.next())) {
                        orphans.push(orphan);
                    }
                }
            }
            Err(error) => {
                if let Some(Rider(first)) = self.riders.into_iter().next() {
                    let _ = first.send(Err(error));
                }
            }
        }
        Orphans(orphans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_of_a_stopping_worker_asks_for_no_next_job() {
        let stopping = CancellationToken::new();
        assert!(Rider::unless_stopping(&stopping).is_some());
        stopping.cancel();
        assert!(Rider::unless_stopping(&stopping).is_none());
    }

    #[tokio::test]
    async fn a_rider_dropped_without_a_claim_is_heard_as_nothing() {
        let (rider, next) = Rider::new();
        drop(rider);
        let heard = next.heard(&CancellationToken::new()).await;
        assert!(matches!(heard, Heard::Nothing), "{heard:?}");
    }
}
