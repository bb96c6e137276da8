//! The long-running processes: loops and wiring, little logic.

pub mod api;
pub mod dev;
pub mod worker;
