//! vidq: video uploads, distributed encoding and "ready" notifications, with PostgreSQL as the
//! only queue and S3 for the bytes.
//!
//! The modules follow the architecture, outside in:
//! - [`config`]: one typed configuration, read from flags and `VIDQ_*` variables.
//! - [`shutdown`]: the cancellation token every role stops on.
//! - [`batching`]: work in groups, a queue in front of a few tasks that take what waits.
//! - [`domain`]: pure types and rules (ids, states, validation, event payloads). No I/O.
//! - [`db`]: the only code that knows SQL; query functions take the caller's connection.
//! - [`app`]: use-cases, one function per transaction (create upload, confirm, delete...).
//! - [`http`]: the actix-web API: routes, request/response types, the error-code table.
//! - [`rtmp`]: the RTMP listener: encoders publish, an FFmpeg child per stream makes HLS.
//! - [`adapters`]: the outside world (S3 storage, FFmpeg, the embedded S3 server).
//! - [`pipeline`]: one encoding attempt: download, probe, encode, outputs to S3.
//! - [`queue`]: the worker engine: claim loop, heartbeat lease, fenced outcomes.
//! - [`relay`]: the outbox relay: routing, webhook and NATS delivery, fenced acks.
//! - [`sweeper`]: the upload sweeper: forward cursor, bounded queue, breaker, re-driven PUTs.
//! - [`roles`]: the long-running processes (`api`, `worker`, `relay`, `sweeper`, `dev`) and
//!   their wiring.
//! - [`cli`]: one-shot operator commands (`vidq user`, `vidq jobs`, `vidq reconcile`,
//!   `vidq probe`, `vidq encode`).
//! - `bench` (the `bench` feature, on by default): every `vidq bench` command and the fault
//!   fixtures it shares with the tests.
//! - [`telemetry`]: logging set-up, and a worker's account of itself.
//! - [`metrics`]: the Prometheus families every role's `/metrics` renders.

pub mod adapters;
pub mod app;
pub mod batching;
#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod config;
pub mod db;
pub mod domain;
pub mod http;
pub mod metrics;
pub mod pipeline;
pub mod queue;
pub mod relay;
pub mod roles;
pub mod rtmp;
pub mod shutdown;
pub mod sweeper;
pub mod sync;
pub mod telemetry;
