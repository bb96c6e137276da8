//! Where one delivery of an event to one sink is: waiting for its next try, being sent under
//! a relay's lease, or finished one of three ways.

spelled_states! {
    /// The state of one delivery.
    pub enum DeliveryStatus {
        /// Waiting for its next try (due at `next_attempt_at`).
        Pending = "pending",
        /// Claimed by a relay under a lease.
        Sending = "sending",
        /// The sink accepted it.
        Delivered = "delivered",
        /// Every try of the schedule failed.
        Exhausted = "exhausted",
        /// Dropped unsent: its endpoint was disabled.
        Discarded = "discarded",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for &s in DeliveryStatus::ALL {
            assert_eq!(s.as_str().parse::<DeliveryStatus>().unwrap(), s);
        }
    }
}
