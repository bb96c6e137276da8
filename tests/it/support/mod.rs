//! Everything the test modules share; a test module imports from here and from no other
//! test module.

pub mod app;
pub mod db;
pub mod deployment;
pub mod haproxy;
pub mod process;
pub mod s3_switch;
