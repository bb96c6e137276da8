//! The long-running processes: loops and wiring, little logic.

pub mod api;
pub mod dev;
pub mod presence;
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

/// The node name that ties spool files to the sweeper that lands them: the configured one,
/// else the host name, else `vidq` (the API and the sweeper of one node must agree, so no
/// process id goes into it).
pub(crate) fn spool_node(configured: Option<&str>) -> String {
    configured
        .map(str::to_owned)
        .or_else(host_name)
        .unwrap_or_else(|| "vidq".to_owned())
}
