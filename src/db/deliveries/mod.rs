//! The outbox and the relay's queue, the two tables every event passes through: producers
//! insert events in their own transactions (`outbox`); one delivery per (event,
//! destination) is routed from the outbox exactly once, claimed with `FOR UPDATE SKIP LOCKED` and a lease, acknowledged with an UPDATE
//! fenced on the claim token. The same shape as encoding jobs, so several relays can run.
//!
//! The statements are grouped by the step of a delivery's life they serve: [`route()`]
//! (outbox to deliveries), [`claim()`] and [`ack()`] (a relay's send loop), resends, the owner's
//! read of the log, and removal (pruning, a user's deletion). Callers use the names
//! re-exported here; the submodules are only where each statement lives.

mod ack;
mod claim;
mod cleanup;
pub mod outbox;
mod resend;
mod route;
mod views;

pub use ack::{Ack, Settled, ack};
pub use claim::{ClaimedDelivery, EndpointTarget, claim};
pub use cleanup::{delete_page_of_owner, lock_of_owner, prune};
pub use resend::{ResendableEvent, insert_resend, lock_event_of_owner, resends_since, waiting};
pub use route::{ROUTE_SQL, Routed, route};
pub use views::{AttemptRow, DeliveryRow, of_endpoint, pending_count};
