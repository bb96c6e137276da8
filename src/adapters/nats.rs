//! The NATS JetStream sink: each event is published to `{prefix}.{type}` with `Nats-Msg-Id`
//! set to the event id, and counts as sent only once the stream acknowledges it. A retry after
//! a lost ack (or a relay that died after publishing) carries the same id, and the stream
//! drops a message whose id it saw within its duplicate window ([`DUPLICATE_WINDOW`], 2
//! minutes, on a stream vidq creates; an existing stream keeps its own). Delivery is at least
//! once: a republish after the window (a later retry of the schedule) is stored again, so
//! consumers drop `Nats-Msg-Id`s they have already handled.

use std::time::Duration;

use async_nats::jetstream::{self, stream};

/// The duplicate window vidq asks for when it creates the stream.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// A connected JetStream publisher.
#[derive(Clone)]
pub struct NatsSink {
    js: jetstream::Context,
    prefix: String,
}

impl std::fmt::Debug for NatsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSink")
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// What the stream said about one publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The stream already had this `Nats-Msg-Id` and dropped the copy.
    pub duplicate: bool,
    /// The stream sequence of the (original) message.
    pub sequence: u64,
}

impl NatsSink {
    /// Connects and makes sure `stream` exists and captures `{prefix}.>` (created with a
    /// 2-minute duplicate window if missing; an existing stream is used as it is).
    pub async fn connect(url: &str, stream_name: &str, prefix: &str) -> anyhow::Result<Self> {
        use anyhow::Context;
        let client = async_nats::ConnectOptions::new()
            .name("vidq-relay")
            .connect(url)
            .await
            .with_context(|| format!("connecting to NATS at {url} (VIDQ_NATS_URL)"))?;
        let js = jetstream::new(client);
        js.get_or_create_stream(stream::Config {
            name: stream_name.to_owned(),
            subjects: vec![format!("{prefix}.>")],
            duplicate_window: DUPLICATE_WINDOW,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating or opening the JetStream stream {stream_name}"))?;
        Ok(Self {
            js,
            prefix: prefix.to_owned(),
        })
    }

    /// The subject an event type goes to.
    pub fn subject(&self, event_type: &str) -> String {
        format!("{}.{event_type}", self.prefix)
    }

    /// Publishes one event and waits for the stream's ack.
    pub async fn publish(
        &self,
        event_id: &str,
        event_type: &str,
        body: Vec<u8>,
    ) -> Result<Published, String> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", event_id);
        let ack = self
            .js
            .publish_with_headers(self.subject(event_type), headers, body.into())
            .await
            .map_err(|err| format!("NATS publish failed: {err}"))?
            .await
            .map_err(|err| format!("JetStream did not acknowledge: {err}"))?;
        Ok(Published {
            duplicate: ack.duplicate,
            sequence: ack.sequence,
        })
    }
}
