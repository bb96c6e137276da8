//! The outbox relay: turns committed outbox rows into deliveries and sends them.
//!
//! Each round it (1) routes unrouted outbox rows into `event_deliveries`, one per matching
//! webhook endpoint plus one for NATS when configured, (2) claims due deliveries with
//! `FOR UPDATE SKIP LOCKED` and a lease, as many as it has free send slots, (3) sends each
//! outside any transaction, and (4) acknowledges the results in batches, each row fenced on
//! its claim token. A relay that dies mid-send leaves its rows `sending`; another relay
//! claims them when the lease runs out and sends them again with the same event id.
//!
//! It wakes on LISTEN/NOTIFY from the producing transactions and polls as the safety net.

pub mod health;
pub mod sink;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::db::deliveries::{Ack, ClaimedDelivery, Settled};
use crate::db::wake::{Announce, WakeSession};
use crate::db::{self, DbPool};
use crate::domain::ids::WebhookId;
use crate::domain::retry::{NextTry, RetrySchedule};
use crate::domain::sink::SinkKind;
use sink::{Sinks, TryOutcome};

/// How a relay paces itself.
#[derive(Clone, Debug)]
pub struct RelaySettings {
    /// Written to each claim and each logged try.
    pub relay_id: String,
    /// Safety-net poll interval.
    pub poll: Duration,
    /// How long a claim is ours; must outlast a try (the webhook timeout).
    pub lease: Duration,
    /// Most outbox rows routed and deliveries claimed per statement.
    pub batch: u32,
    /// Most tries in flight at once.
    pub concurrency: u32,
    /// Delays before each try.
    pub schedule: RetrySchedule,
    /// Delivered history older than this is pruned.
    pub retention: Duration,
}

/// A relay process's engine.
pub struct Relay {
    /// Pool (routing, claims and acks share it).
    pub pool: DbPool,
    /// For the LISTEN connection; `None` relies on the poll alone (how polling relays
    /// behave; `vidq bench relay` measures it).
    pub listen_url: Option<String>,
    /// Pacing.
    pub settings: RelaySettings,
    /// Where deliveries are sent, by the kind routing gave them.
    pub sinks: Sinks,
}

/// A finished try on its way to the acknowledger.
struct Settlement {
    ack: Ack,
    /// A `410 Gone` endpoint to turn off.
    disable: Option<WebhookId>,
}

/// How often history is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(600);
/// Most tries acknowledged in one statement.
const ACK_BATCH: usize = 512;

/// What the relay's loop carries from round to round.
struct Rounds {
    /// Wakes an idle relay: NOTIFY from a producer.
    wake: Arc<Notify>,
    /// One permit per try that may be in flight.
    slots: Arc<Semaphore>,
    /// The tries in flight.
    sending: JoinSet<()>,
    /// Finished tries on their way to the acknowledger.
    settled: mpsc::Sender<Settlement>,
    /// Whether producers know to wake this relay.
    sentinel: WakeSession,
}

/// What one round found.
struct Round {
    /// Rows were routed or deliveries claimed: look again soon.
    found: bool,
    /// Free send slots when the round claimed.
    free: usize,
}

/// Whether the loop goes on.
#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

impl Relay {
    /// Runs until `shutdown`; then stops claiming, lets tries in flight finish (each is bounded
    /// by the webhook timeout), acknowledges them and returns.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let wake = self.listen(&shutdown).await;
        // Bounded: an acknowledger that falls behind slows sending down, rather than letting
        // finished tries pile up until their leases lapse and they are sent again.
        let (settled, settled_rx) = mpsc::channel(ACK_BATCH * 2);
        let acker = tokio::spawn(self.clone().acknowledge(settled_rx));
        let pruner = tokio::spawn(self.clone().prune_periodically(shutdown.child_token()));
        let mut rounds = Rounds {
            wake,
            slots: Arc::new(Semaphore::new(self.settings.concurrency as usize)),
            sending: JoinSet::new(),
            settled,
            sentinel: WakeSession::new(self.listen_url.clone()),
        };
        tracing::info!(
            relay = %self.settings.relay_id,
            nats = self.sinks.has(SinkKind::Nats),
            concurrency = self.settings.concurrency,
            "relay started"
        );
        while !shutdown.is_cancelled() {
            let round = self.round(&mut rounds).await;
            let flow = if round.found {
                Self::after_busy_round(&mut rounds, &shutdown).await
            } else {
                self.idle(&mut rounds, round.free, &shutdown).await
            };
            if flow == Flow::Stop {
                break;
            }
        }
        self.finish(rounds, acker, pruner).await;
    }

    /// LISTENs (when the relay has a URL for it) before the first round routes, so a NOTIFY
    /// sent in between cannot be missed; returns what a NOTIFY wakes.
    async fn listen(&self, shutdown: &CancellationToken) -> Arc<Notify> {
        let wake = Arc::new(Notify::new());
        if let Some(url) = &self.listen_url {
            let on_notify = {
                let wake = wake.clone();
                move || wake.notify_one()
            };
            crate::queue::listener::spawn(
                url.clone(),
                db::deliveries::outbox::EVENTS_CHANNEL,
                on_notify,
                shutdown.child_token(),
            )
            .await;
        }
        wake
    }

    /// Routes a batch, claims as many due deliveries as there are free slots and starts
    /// sending each.
    async fn round(self: &Arc<Self>, rounds: &mut Rounds) -> Round {
        while rounds.sending.try_join_next().is_some() {}
        let routed = self.route().await;
        let free = rounds
            .slots
            .available_permits()
            .min(self.settings.batch as usize);
        let claimed = if free > 0 {
            self.claim(free).await
        } else {
            Vec::new()
        };
        let found = routed > 0 || !claimed.is_empty();
        for delivery in claimed {
            self.dispatch(rounds, delivery).await;
        }
        Round { found, free }
    }

    /// Sends one delivery in its own task once a slot is free; the result goes to the
    /// acknowledger.
    async fn dispatch(self: &Arc<Self>, rounds: &mut Rounds, delivery: ClaimedDelivery) {
        let permit = rounds
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let relay = self.clone();
        let settled = rounds.settled.clone();
        rounds.sending.spawn(async move {
            let settlement = relay.try_once(delivery).await;
            let _ = settled.send(settlement).await;
            drop(permit);
        });
    }

    /// After a round that found work: look again at once if a slot is free; if every slot is
    /// busy, wait for one.
    async fn after_busy_round(rounds: &mut Rounds, shutdown: &CancellationToken) -> Flow {
        if rounds.slots.available_permits() > 0 {
            // Busy: look again at once. While events keep coming, the relay never sleeps and
            // producers need not NOTIFY it.
            rounds.sentinel.withdraw().await;
            return Flow::Continue;
        }
        // Saturated: stay announced, so producers keep waking relays that have room, and go
        // on as soon as one of this relay's own tries finishes.
        if !rounds.sentinel.holds() {
            rounds.sentinel.announce().await;
        }
        tokio::select! {
            () = shutdown.cancelled() => Flow::Stop,
            permit = rounds.slots.acquire() => {
                drop(permit);
                Flow::Continue
            }
        }
    }

    /// After a round that found nothing: make sure producers will wake us, then sleep until a
    /// NOTIFY, a freed slot (when due deliveries waited for one) or the poll.
    async fn idle(&self, rounds: &mut Rounds, free: usize, shutdown: &CancellationToken) -> Flow {
        let nap = match rounds.sentinel.announce().await {
            // Now that producers NOTIFY, look once more for what committed before.
            Announce::Announced => return Flow::Continue,
            Announce::Busy => rounds.sentinel.busy_nap(),
            Announce::Covered => self.settings.poll,
        };
        // Due deliveries may be waiting for a slot: then a finished try ends the nap. (An
        // acquire, unlike a check, cannot miss a slot freed in between.)
        let slots = &rounds.slots;
        let slot_freed = async {
            if free == 0 {
                drop(slots.acquire().await);
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => Flow::Stop,
            () = rounds.wake.notified() => Flow::Continue,
            () = slot_freed => Flow::Continue,
            () = tokio::time::sleep(nap) => Flow::Continue,
        }
    }

    /// Hands the wake-ups over, lets the tries in flight finish and be acknowledged, and stops
    /// the pruner.
    async fn finish(
        &self,
        mut rounds: Rounds,
        acker: tokio::task::JoinHandle<()>,
        pruner: tokio::task::JoinHandle<()>,
    ) {
        // Relays that slept because this one was announced take over now.
        rounds.sentinel.hand_over().await;
        tracing::info!(
            in_flight = rounds.sending.len(),
            "relay stopping; finishing tries in flight"
        );
        while rounds.sending.join_next().await.is_some() {}
        drop(rounds.settled);
        let _ = acker.await;
        let _ = pruner.await;
        tracing::info!(relay = %self.settings.relay_id, "relay stopped");
    }

    /// Routes one batch; returns how many outbox rows it routed.
    async fn route(&self) -> i64 {
        let routed = async {
            let mut conn = self.pool.get().await?;
            Ok::<_, db::DbError>(
                db::deliveries::route(
                    &mut conn,
                    i64::from(self.settings.batch),
                    self.sinks.has(SinkKind::Nats),
                )
                .await?,
            )
        }
        .await;
        match routed {
            Ok(routed) => {
                if routed.events > 0 {
                    tracing::debug!(
                        events = routed.events,
                        deliveries = routed.deliveries,
                        "routed"
                    );
                }
                routed.events
            }
            Err(error) => {
                tracing::warn!(error = %crate::telemetry::error_chain(&error), "routing outbox rows failed; retrying");
                0
            }
        }
    }

    async fn claim(&self, limit: usize) -> Vec<ClaimedDelivery> {
        let claimed = async {
            let mut conn = self.pool.get().await?;
            db::deliveries::claim(
                &mut conn,
                &self.settings.relay_id,
                limit as i64,
                self.settings.lease.as_secs_f64(),
                self.sinks.has(SinkKind::Nats),
            )
            .await
        }
        .await;
        claimed.unwrap_or_else(|error| {
            tracing::warn!(error = %crate::telemetry::error_chain(&error), "claiming deliveries failed; retrying");
            Vec::new()
        })
    }

    /// Sends one claimed delivery through the sink of its kind and decides where it goes next.
    async fn try_once(&self, delivery: ClaimedDelivery) -> Settlement {
        let started_at = Utc::now();
        let outcome = match self.sinks.get(delivery.sink) {
            Some(sink) => sink.send(&delivery).await,
            // Claims only take kinds this relay has; this is a relay whose settings changed
            // under a claim.
            None => TryOutcome::failed(format!("this relay has no {} sink", delivery.sink)),
        };
        self.settle(&delivery, outcome, started_at)
    }

    fn settle(
        &self,
        delivery: &ClaimedDelivery,
        outcome: TryOutcome,
        started_at: chrono::DateTime<Utc>,
    ) -> Settlement {
        let mut ack = Ack {
            id: delivery.id,
            token: delivery.claim_token,
            settled: Settled::Delivered,
            retry_secs: 0.0,
            response_status: None,
            error: None,
            started_at,
        };
        let mut disable = None;
        match outcome {
            TryOutcome::Delivered { status } => {
                ack.response_status = Some(i32::from(status));
                tracing::debug!(event = %delivery.event_id, sink = %delivery.sink, attempt = delivery.attempt, "delivered");
            }
            TryOutcome::Discard { reason } => {
                ack.settled = Settled::Discarded;
                ack.error = Some(reason);
            }
            TryOutcome::Gone => {
                ack.settled = Settled::Discarded;
                ack.response_status = Some(410);
                ack.error = Some("the receiver answered 410 Gone; endpoint disabled".into());
                disable = delivery.endpoint.as_ref().map(|e| e.id);
                tracing::warn!(endpoint = ?disable, "receiver answered 410 Gone; disabling the endpoint");
            }
            TryOutcome::Failed {
                status,
                error,
                retry_after,
            } => {
                let tried = u32::try_from(delivery.attempt).unwrap_or(u32::MAX);
                match self
                    .settings
                    .schedule
                    .after_failure(tried, retry_after, rand::random())
                {
                    NextTry::After(delay) => {
                        ack.settled = Settled::Retry;
                        ack.retry_secs = delay.as_secs_f64();
                        tracing::info!(event = %delivery.event_id, sink = %delivery.sink, attempt = delivery.attempt, %error, retry_in_ms = delay.as_millis() as u64, "delivery failed; will retry");
                    }
                    NextTry::Exhausted => {
                        ack.settled = Settled::Exhausted;
                        tracing::warn!(event = %delivery.event_id, sink = %delivery.sink, attempt = delivery.attempt, %error, "delivery failed on its last try; exhausted");
                    }
                }
                ack.response_status = status.map(i32::from);
                ack.error = Some(error);
            }
        }
        // A 410 is discarded like any refusal, but an operator wants it told apart.
        let outcome = if disable.is_some() {
            "gone"
        } else {
            ack.settled.label()
        };
        let sink = delivery.sink.as_str();
        crate::metrics::DELIVERIES
            .with_label_values(&[sink, outcome])
            .inc();
        if ack.settled == Settled::Delivered {
            let lag = (Utc::now() - delivery.event_created_at)
                .to_std()
                .unwrap_or_default();
            crate::metrics::DELIVERY_LAG_SECONDS
                .with_label_values(&[sink])
                .observe(lag.as_secs_f64());
        }
        Settlement { ack, disable }
    }

    /// Acknowledges finished tries in batches until every sender is gone.
    async fn acknowledge(self: Arc<Self>, mut settled: mpsc::Receiver<Settlement>) {
        while let Some(first) = settled.recv().await {
            let mut batch = vec![first];
            while batch.len() < ACK_BATCH {
                match settled.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            self.ack_batch(&batch).await;
        }
    }

    async fn ack_batch(&self, batch: &[Settlement]) {
        let acks: Vec<&Ack> = batch.iter().map(|s| &s.ack).collect();
        let mut gone: Vec<WebhookId> = batch.iter().filter_map(|s| s.disable).collect();
        gone.sort_unstable();
        gone.dedup();
        // What is done stays done across retries: an acknowledgement repeated after a later
        // step failed would match no claim token and read as tries lost to another relay.
        let mut acked: Option<usize> = None;
        let mut disabled = 0;
        let mut delay = Duration::from_millis(100);
        for tries_left in (0..5).rev() {
            let done = async {
                let mut conn = self.pool.get().await?;
                if acked.is_none() {
                    let ids =
                        db::deliveries::ack(&mut conn, &self.settings.relay_id, &acks).await?;
                    acked = Some(ids.len());
                }
                while let Some(&endpoint) = gone.get(disabled) {
                    db::webhooks::disable(&mut conn, endpoint, "the receiver answered 410 Gone")
                        .await?;
                    disabled += 1;
                }
                Ok::<_, db::DbError>(())
            }
            .await;
            match done {
                Ok(()) => {
                    let acked = acked.unwrap_or_default();
                    if acked < acks.len() {
                        tracing::warn!(
                            lost = acks.len() - acked,
                            "some tries finished after their lease ran out; another relay owns them now"
                        );
                    }
                    return;
                }
                Err(error) if tries_left > 0 => {
                    tracing::warn!(error = %crate::telemetry::error_chain(&error), "acknowledging deliveries failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                Err(error) if acked.is_some() => {
                    // Their next 410 disables them again.
                    tracing::error!(error = %crate::telemetry::error_chain(&error), endpoints = gone.len() - disabled, "could not disable endpoints that answered 410 Gone");
                }
                Err(error) => {
                    // The rows stay `sending` and are sent again after the lease, same ids.
                    tracing::error!(error = %crate::telemetry::error_chain(&error), count = acks.len(), "could not acknowledge deliveries; they will be resent after the lease");
                }
            }
        }
    }

    /// Prunes finished history past the retention now and every [`PRUNE_EVERY`], in its own
    /// task so a large first prune never delays deliveries.
    async fn prune_periodically(self: Arc<Self>, stop: CancellationToken) {
        loop {
            self.prune().await;
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(PRUNE_EVERY) => {}
            }
        }
    }

    async fn prune(&self) {
        let retention = self.settings.retention.as_secs_f64();
        let pruned = async {
            let mut total = 0;
            loop {
                let mut conn = self.pool.get().await?;
                let n = db::deliveries::prune(&mut conn, retention, 1000).await?;
                total += n;
                if n < 1000 {
                    return Ok::<_, db::DbError>(total);
                }
            }
        }
        .await;
        match pruned {
            Ok(0) => {}
            Ok(n) => tracing::info!(events = n, "pruned delivered history past the retention"),
            Err(error) => {
                tracing::warn!(error = %crate::telemetry::error_chain(&error), "pruning failed")
            }
        }
    }
}
