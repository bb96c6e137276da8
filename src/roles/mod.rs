//! The long-running processes: loops and wiring, little logic.

pub mod api;
pub mod dev;
pub mod relay;
pub mod sweeper;
pub mod worker;

/// This machine's host name, if it has one.
pub(crate) fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}
