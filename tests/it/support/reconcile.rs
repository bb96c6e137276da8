//! `vidq reconcile` run against a test's database and bucket, and its exit status checked.

use std::process::Output;

use crate::support::app::{TEST_BUCKET, TestApp};
use crate::support::cli::{stderr, vidq};

/// Runs `vidq reconcile ARGS` against the test's database and bucket.
pub async fn reconcile(app: &TestApp, args: &[&str]) -> Output {
    let endpoint = app.s3.as_ref().unwrap().endpoint();
    reconcile_at(&app.db.url, &endpoint, args).await
}

/// Runs `vidq reconcile ARGS` against `database_url` and the test bucket at `endpoint`.
pub async fn reconcile_at(database_url: &str, endpoint: &str, args: &[&str]) -> Output {
    let mut all = vec!["reconcile"];
    all.extend_from_slice(args);
    vidq(
        &all,
        &[
            ("DATABASE_URL", database_url),
            ("VIDQ_S3_ENDPOINT", endpoint),
            ("VIDQ_S3_BUCKET", TEST_BUCKET),
            ("VIDQ_S3_FORCE_PATH_STYLE", "true"),
            ("AWS_ACCESS_KEY_ID", "test-access"),
            ("AWS_SECRET_ACCESS_KEY", "test-secret"),
        ],
    )
    .await
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Asserts the exit status and returns stdout.
pub fn expect(output: &Output, code: i32) -> String {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
    stdout(output)
}
