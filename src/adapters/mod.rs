//! The outside world: S3 storage through aws-sdk-s3, and an embedded S3-compatible server
//! for `vidq dev` and the tests.

pub mod ffmpeg;
pub mod s3_server;
pub mod storage;
