//! Where a delivery goes: routing records one kind per delivery, and the relay sends it through
//! the sink registered for that kind.

use std::fmt;
use std::str::FromStr;

use super::upload::UnknownState;

/// A kind of destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SinkKind {
    /// An uploader's webhook endpoint (Standard Webhooks POST).
    Webhook,
    /// The NATS JetStream stream.
    Nats,
}

impl SinkKind {
    /// The stored form (`event_deliveries.sink`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::Nats => "nats",
        }
    }
}

impl fmt::Display for SinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SinkKind {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "webhook" => Ok(Self::Webhook),
            "nats" => Ok(Self::Nats),
            other => Err(UnknownState(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_stored_form() {
        for kind in [SinkKind::Webhook, SinkKind::Nats] {
            assert_eq!(kind.as_str().parse::<SinkKind>().unwrap(), kind);
        }
        assert!("smtp".parse::<SinkKind>().is_err());
    }
}
