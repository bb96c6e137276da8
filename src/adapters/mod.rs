//! The outside world: S3 storage through aws-sdk-s3, an embedded S3-compatible server for
//! `vidq dev` and the tests, a private PostgreSQL server for `vidq dev`, FFmpeg, webhook destinations and the NATS JetStream sink.

pub mod destination;
pub mod ffmpeg;
pub mod incoming;
pub mod nats;
pub mod presign;
pub mod private_pg;
pub mod s3_server;
pub mod spool;
pub mod storage;
pub mod storage_watch;
pub mod writer_share;
