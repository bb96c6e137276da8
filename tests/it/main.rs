//! vidq's integration tests: one binary, real PostgreSQL, a real S3-protocol server in the
//! process, the real HTTP server on a loopback port.

mod attempt_budget;
mod cli;
mod clips;
mod confirm;
mod events;
mod harness;
mod health;
mod idle_line;
mod jobs_cli;
mod layout;
mod media;
mod mp4;
mod nats;
mod pipeline;
mod proxy;
mod queue;
mod receiver;
mod relay;
mod relay_process;
mod schema;
mod scripted;
mod uploads;
mod users;
mod videos;
mod worker_process;
