//! One-shot operator commands: `vidq user ...`, `vidq jobs ...`, `vidq probe`, `vidq encode`.

pub mod jobs;
pub mod media;
pub mod users;

pub use users::{UserCommand, user};
