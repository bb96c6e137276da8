//! Helpers the test modules share.

pub mod deployment;
pub mod s3_switch;
