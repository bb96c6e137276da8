//! Processes and ports: loopback ports for child processes, `vidq` roles run as children,
//! servers the whole run shares, where every process records the routes it answered,
//! whether a server has read what a loopback connection sent it, and waiting until a started
//! process answers.

use std::time::Duration;

/// Where this run of the suite records every (method, route, status) the API answers, in
/// its own process and in the `vidq` processes it starts; `tests/routes_documented.rs`
/// (run after this binary) holds `/openapi.json` to them. Earlier runs' records go.
pub fn routes_seen_dir() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let all = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("routes-seen");
        if let Ok(entries) = std::fs::read_dir(&all) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = all.join(format!("run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        vidq::http::route_log::record_to(dir.clone());
        dir
    })
    .clone()
}

/// A loopback port free a moment ago (for child processes that need a fixed one). Taken
/// below the kernel's ephemeral range (`ip_local_port_range`) and never twice in one run: a
/// port from `bind(0)` could meanwhile become the source port of any outgoing connection
/// (a pool's, a client's) before the child that was handed it binds it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: std::sync::OnceLock<AtomicU32> = std::sync::OnceLock::new();
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const FIRST: u32 = 10_000;
    if ephemeral_from <= FIRST + 1_000 {
        // No room below the ephemeral range: take what the kernel hands out.
        return std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
    }
    let span = ephemeral_from - FIRST;
    // Each run starts elsewhere, so a child a previous run left behind is not met first.
    let next = NEXT.get_or_init(|| AtomicU32::new(std::process::id() % span));
    loop {
        let port = FIRST + next.fetch_add(1, Ordering::Relaxed) % span;
        let port = u16::try_from(port).expect("below the ephemeral range");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Whether something accepts TCP connections on `addr` within a second.
pub fn answers(addr: &str) -> bool {
    addr.parse().is_ok_and(|addr| {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
    })
}

/// Runs `program args...` until this test process exits, then kills it and removes
/// `scratch` (a detached shell in its own process group, so a Ctrl-C of the run does not
/// take the watcher down before it has cleaned up): for servers the tests share.
// The watcher is meant to outlive this process; nobody waits for it.
#[allow(clippy::zombie_processes)]
pub fn run_while_tests_run(program: &str, args: &[&str], scratch: &std::path::Path) {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"pid=$0; scratch=$1; shift; "$@" & child=$!; while kill -0 "$pid" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 1; done; kill "$child" 2>/dev/null; wait "$child"; rm -rf "$scratch""#)
        .arg(std::process::id().to_string())
        .arg(scratch)
        .arg(program)
        .args(args)
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
}

/// `vidq ROLE` as a child process: a clean environment (PATH and `RUST_LOG=info` only),
/// stdout discarded, the log written to `log`, killed if the test drops it.
pub fn vidq_child(role: &str, log: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_vidq"));
    command
        .arg(role)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .env("VIDQ_ROUTE_LOG_DIR", routes_seen_dir())
        // Any free port: tests run side by side, and 1935 (the default) is one port.
        .env("VIDQ_RTMP_ADDR", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        // Appended: a role started again after a crash adds to what it said before.
        .stderr(
            std::fs::File::options()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .kill_on_drop(true);
    command
}

/// Waits until the server at the far end of `stream` (a loopback connection) has read every
/// byte sent on it: the client's socket holds nothing unacknowledged and the server's end
/// nothing unread (`tx_queue` and `rx_queue` of the two ends in `/proc/net/tcp`).
pub async fn wait_until_the_server_has_read(stream: &tokio::net::TcpStream) {
    let (client, server) = (stream.local_addr().unwrap(), stream.peer_addr().unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let unsent = socket_queues(client, server).map(|(tx, _)| tx);
        let unread = socket_queues(server, client).map(|(_, rx)| rx);
        if unsent == Some(0) && unread == Some(0) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{client} -> {server}: {unsent:?} bytes unacknowledged, {unread:?} unread"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `(tx_queue, rx_queue)` of the IPv4 TCP socket bound to `local` and connected to `remote`,
/// as `/proc/net/tcp` lists it (addresses in the kernel's byte order, ports in hex).
fn socket_queues(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Option<(u64, u64)> {
    let hex = |addr: std::net::SocketAddr| match addr {
        std::net::SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        ),
        std::net::SocketAddr::V6(_) => panic!("{addr}: only IPv4 sockets are looked up"),
    };
    let (local, remote) = (hex(local), hex(remote));
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) != Some(&local.as_str()) || fields.get(2) != Some(&remote.as_str()) {
            return None;
        }
        let (tx, rx) = fields.get(4)?.split_once(':')?;
        Some((
            u64::from_str_radix(tx, 16).ok()?,
            u64::from_str_radix(rx, 16).ok()?,
        ))
    })
}

/// Returns once the process at `base` (`http://127.0.0.1:PORT`) answers `GET /healthz` with a
/// success; after 30 s, panics with `logs()` (the process's log, say).
pub async fn answering(http: &reqwest::Client, base: &str, logs: impl Fn() -> String) {
    let url = format!("{base}/healthz");
    let answered = answers_within(http, &url, Duration::from_secs(30)).await;
    assert!(answered, "{base} did not answer:\n{}", logs());
}

/// Whether `GET url` succeeds within `within`, asked every 50 ms.
pub async fn answers_within(http: &reqwest::Client, url: &str, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        let answer = http.get(url).send().await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
