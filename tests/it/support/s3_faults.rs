//! The S3 fault proxy lives in the library, where `vidq bench chaos` uses it too.

pub use vidq::bench::s3_faults::*;
