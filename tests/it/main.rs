//! vidq's integration tests: one binary, real PostgreSQL, a real S3-protocol server in the
//! process, the real HTTP server on a loopback port.

mod attempt_faults;
mod cli;
mod clips;
mod confirm;
mod error_texts;
mod endpoints;
mod events;
mod harness;
mod health;
mod http_edges;
mod idle_line;
mod jobs_cli;
mod leftovers;
mod media;
mod mp4;
mod nats;
mod pipeline;
mod playback;
mod proxy;
mod queue;
mod receiver;
mod relay;
mod relay_process;
mod runs;
mod s3_timeouts;
mod resend;
mod schema;
mod scripted;
mod uploads;
mod user_delete;
mod users;
mod videos;
mod webhooks_cap;
mod worker_process;
