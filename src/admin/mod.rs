//! One-shot operator commands: `vidq user ...`, `vidq probe`, `vidq encode`.

pub mod media;
pub mod users;

pub use users::{UserCommand, user};
