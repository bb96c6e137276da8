//! One-shot operator commands: `vidq user ...`, `vidq jobs ...`, `vidq reconcile`, `vidq probe`,
//! `vidq encode`.

pub mod jobs;
pub mod media;
pub mod reconcile;
pub mod users;

pub use users::{UserCommand, user};
