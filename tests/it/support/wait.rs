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
