//! Helpers the test modules share.

pub mod deployment;
pub mod haproxy;
pub mod s3_switch;
