//! Sinks: the senders deliveries go through. Routing records each delivery's [`SinkKind`];
//! the relay hands a claimed delivery to the sink registered for that kind, so adding a
//! destination is one more [`Sink`], not another branch in the relay.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::adapters::nats::NatsSink;
use crate::db::deliveries::ClaimedDelivery;
use crate::domain::sink::SinkKind;

/// What one try came to.
#[derive(Debug, Clone, PartialEq)]
pub enum TryOutcome {
    /// The destination took it (a 2xx answer, a stream acknowledgement).
    Delivered {
        /// The status code (200 for a stream acknowledgement).
        status: u16,
    },
    /// `410 Gone`: the receiver asks never to be sent anything again.
    Gone,
    /// Not sent, and never will be (the endpoint was disabled meanwhile).
    Discard {
        /// Why, for the delivery log.
        reason: String,
    },
    /// Anything else: retry on the schedule (or later, if `Retry-After` asks).
    Failed {
        /// The status code, if the receiver answered.
        status: Option<u16>,
        /// What went wrong, for the delivery log.
        error: String,
        /// The receiver's `Retry-After`.
        retry_after: Option<Duration>,
    },
}

impl TryOutcome {
    /// A failure without an answer from the destination.
    pub fn failed(error: impl Into<String>) -> Self {
        Self::Failed {
            status: None,
            error: error.into(),
            retry_after: None,
        }
    }
}

/// A try in flight.
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = TryOutcome> + Send + 'a>>;

/// Sends deliveries of one kind.
pub trait Sink: Send + Sync {
    /// One try of `delivery`; never panics on a destination's answer, every failure is an
    /// outcome.
    fn send<'a>(&'a self, delivery: &'a ClaimedDelivery) -> SendFuture<'a>;
}

/// The sinks one relay has, by kind.
pub struct Sinks {
    webhook: Box<dyn Sink>,
    nats: Option<Box<dyn Sink>>,
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sinks")
            .field("nats", &self.nats.is_some())
            .finish_non_exhaustive()
    }
}

impl Sinks {
    /// Webhooks only.
    pub fn new(webhook: impl Sink + 'static) -> Self {
        Self {
            webhook: Box::new(webhook),
            nats: None,
        }
    }

    /// Adds the NATS sink.
    pub fn with_nats(mut self, nats: impl Sink + 'static) -> Self {
        self.nats = Some(Box::new(nats));
        self
    }

    /// The sink for `kind`, if this relay has one.
    pub fn get(&self, kind: SinkKind) -> Option<&dyn Sink> {
        match kind {
            SinkKind::Webhook => Some(self.webhook.as_ref()),
            SinkKind::Nats => self.nats.as_deref(),
        }
    }

    /// Whether this relay can send deliveries of `kind` (routing creates NATS deliveries, and
    /// claims take them, only when it can).
    pub fn has(&self, kind: SinkKind) -> bool {
        self.get(kind).is_some()
    }
}

impl Sink for NatsSink {
    fn send<'a>(&'a self, delivery: &'a ClaimedDelivery) -> SendFuture<'a> {
        Box::pin(async move {
            let event_id = delivery.event_id.to_string();
            match self
                .publish(
                    &event_id,
                    &delivery.event_type,
                    delivery.body.clone().into_bytes(),
                )
                .await
            {
                Ok(published) => {
                    if published.duplicate {
                        tracing::debug!(event = %event_id, "JetStream already had this event; the copy was dropped");
                    }
                    TryOutcome::Delivered { status: 200 }
                }
                Err(error) => TryOutcome::failed(error),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every try with its own status, so a test can tell which sink sent.
    struct Fixed(u16);

    impl Sink for Fixed {
        fn send<'a>(&'a self, _: &'a ClaimedDelivery) -> SendFuture<'a> {
            Box::pin(async move { TryOutcome::Delivered { status: self.0 } })
        }
    }

    fn delivery(sink: SinkKind) -> ClaimedDelivery {
        ClaimedDelivery {
            id: 1,
            claim_token: uuid::Uuid::now_v7(),
            sink,
            attempt: 1,
            event_id: uuid::Uuid::now_v7(),
            event_type: "video.ready".into(),
            body: "{}".into(),
            event_created_at: chrono::Utc::now(),
            endpoint: None,
        }
    }

    #[tokio::test]
    async fn each_kind_goes_to_the_sink_registered_for_it() {
        let webhooks_only = Sinks::new(Fixed(201));
        assert!(!webhooks_only.has(SinkKind::Nats));
        assert!(webhooks_only.get(SinkKind::Nats).is_none());
        let both = Sinks::new(Fixed(201)).with_nats(Fixed(202));
        for (kind, status) in [(SinkKind::Webhook, 201), (SinkKind::Nats, 202)] {
            let sink = both.get(kind).unwrap();
            assert_eq!(
                sink.send(&delivery(kind)).await,
                TryOutcome::Delivered { status }
            );
        }
    }
}
