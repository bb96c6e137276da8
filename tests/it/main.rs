//! vidq's integration tests: one binary, real PostgreSQL, a real S3-protocol server in the
//! process, the real HTTP server on a loopback port.

mod cli;
mod confirm;
mod harness;
mod health;
mod schema;
mod uploads;
mod users;
mod videos;
