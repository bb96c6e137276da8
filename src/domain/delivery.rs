//! Where one delivery of an event to one sink is: waiting for its next try, being sent under
//! a relay's lease, or finished one of three ways.

use std::str::FromStr;

use super::upload::UnknownState;

/// The state of one delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Waiting for its next try (due at `next_attempt_at`).
    Pending,
    /// Claimed by a relay under a lease.
    Sending,
    /// The sink accepted it.
    Delivered,
    /// Every try of the schedule failed.
    Exhausted,
    /// Dropped unsent: its endpoint was disabled.
    Discarded,
}

impl DeliveryStatus {
    /// The database and API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Sending => "sending",
            Self::Delivered => "delivered",
            Self::Exhausted => "exhausted",
            Self::Discarded => "discarded",
        }
    }
}

impl FromStr for DeliveryStatus {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "pending" => Self::Pending,
            "sending" => Self::Sending,
            "delivered" => Self::Delivered,
            "exhausted" => Self::Exhausted,
            "discarded" => Self::Discarded,
            other => return Err(UnknownState(other.to_owned())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for s in [
            DeliveryStatus::Pending,
            DeliveryStatus::Sending,
            DeliveryStatus::Delivered,
            DeliveryStatus::Exhausted,
            DeliveryStatus::Discarded,
        ] {
            assert_eq!(s.as_str().parse::<DeliveryStatus>().unwrap(), s);
        }
    }
}
