//! Everything the test modules share; a test module imports from here and from no other
//! test module.

pub mod app;
pub mod clips;
pub mod db;
pub mod deployment;
pub mod haproxy;
pub mod mp4;
pub mod process;
pub mod proxy;
pub mod receiver;
pub mod s3_faults;
pub mod s3_switch;
pub mod scripted;
