//! Conditions waited for, never slept for: each helper polls what the test can observe until
//! it holds, with a deadline.

use std::time::Duration;

use crate::support::app::TestApp;

/// Polls `sql` (a `count(*) AS n` query) until it returns `want`.
pub async fn wait_for_count(app: &TestApp, sql: &str, want: i64, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let n = app.count(sql).await;
        if n == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {sql} = {want} (last {n})"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until `n` backends of `app`'s database wait for a lock (`pg_stat_activity` shows
/// them with `wait_event_type = 'Lock'`): a statement queued behind another transaction's
/// rows is then blocked there, and cannot finish before that transaction ends.
pub async fn wait_for_lock_waits(app: &TestApp, n: i64) {
    wait_for_count(
        app,
        "SELECT count(*) AS n FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'",
        n,
        Duration::from_secs(10),
    )
    .await;
}

/// Waits (up to 10 s) for `path` to be gone; the caller asserts it.
pub async fn wait_gone(path: &std::path::Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while path.exists() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
