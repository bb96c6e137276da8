//! The pure core: identifiers, states and their legal transitions, input validation and event
//! payloads. Nothing here does I/O or knows about diesel or actix.

pub mod api_key;
pub mod artifact;
pub mod delivery;
pub mod destination;
pub mod event;
pub mod ids;
pub mod job;
pub mod keys;
pub mod media;
pub mod retry;
pub mod signature;
pub mod upload;
pub mod video;
