//! The release soak, `vidq bench chaos`, run as an operator runs it: every role its own
//! process (an API and its sweeper, three workers, two relays) against a private PostgreSQL
//! server the soak starts and restarts itself, and an S3 behind the fault proxy, with
//! upload clients (presigned and tus) that retry as real ones do. Its report is read back as
//! JSON; every role's log is read from its working directory.

use std::time::Duration;

use serde_json::Value;

/// Runs `vidq bench chaos --json` with `args`, its working directory in `dir`; returns
/// whether it succeeded, its report and everything it printed.
async fn soak(args: &[&str], dir: &std::path::Path) -> (bool, Value, String) {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_vidq"))
        .args(["bench", "chaos", "--json", "--dir"])
        .arg(dir)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .expect("the soak ends within 10 min")
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .unwrap_or(Value::Null);
    (out.status.success(), report, printed)
}

/// The checks of a report that did not hold.
fn failed_checks(report: &Value) -> Vec<String> {
    report["checks"]
        .as_array()
        .expect("the report lists its checks")
        .iter()
        .filter(|c| c["ok"] != true)
        .map(|c| format!("{}: {}", c["name"], c["detail"]))
        .collect()
}

/// What a failed soak's report says first, kept short so a log cut to its last lines (as
/// CI shows it) still names the check that broke: the failed checks, the ERROR lines by
/// role and the first of them, the API's answers by status.
fn headline(report: &Value) -> String {
    let failed = match report["checks"].as_array() {
        Some(_) => failed_checks(report).join("; "),
        None => "no report (the soak did not finish)".to_owned(),
    };
    format!(
        "failed checks: [{failed}]; ERROR lines: {}; first: {}; answers: {}",
        report["error_lines"], report["first_errors"], report["statuses"]
    )
}

/// The soak ended well and every check of its report held; otherwise fails with the
/// headline first, then everything the soak printed.
fn assert_held(ok: bool, report: &Value, printed: &str) {
    let held = ok && failed_checks(report).is_empty();
    assert!(
        held,
        "{}\n--- the soak's output\n{printed}",
        headline(report)
    );
}

fn log(dir: &std::path::Path, role: &str) -> String {
    std::fs::read_to_string(dir.join("logs").join(format!("{role}.log"))).unwrap_or_default()
}

/// Two `pg_ctl restart -m fast` of the server while uploads are in flight: every role rides
/// through without being restarted (pools reconnect, every LISTEN is re-established and
/// catches up), the API answers 503 rather than 500 in the gap, no role logs an ERROR, and
/// every upload the API confirmed becomes READY with one `video.ready`, delivered.
#[tokio::test]
async fn two_postgres_restarts_under_load_need_no_role_restarted_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, report, printed) = soak(
        &[
            "--seconds",
            "20",
            "--every",
            "10",
            "--faults",
            "pg-restart",
            "--seed",
            "37",
        ],
        dir.path(),
    )
    .await;
    assert_held(ok, &report, &printed);
    let faults = report["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 2, "{printed}");
    assert!(faults.iter().all(|f| f[0] == "pg-restart"), "{printed}");
    assert_eq!(
        report["exited_on_their_own"],
        serde_json::json!([]),
        "no role had to be started again:\n{printed}"
    );
    for killed in report["killed"].as_array().unwrap() {
        assert_eq!(killed[1], 0, "{printed}");
    }
    for errors in report["error_lines"].as_array().unwrap() {
        assert_eq!(errors[1], 0, "no ERROR line in {}:\n{printed}", errors[0]);
    }
    let uploads = report["presigned"].as_u64().unwrap() + report["tus"].as_u64().unwrap();
    assert!(
        uploads >= 10,
        "uploads were in flight throughout: {printed}"
    );
    assert!(report["statuses"].get("500").is_none(), "{printed}");
    // Each role's LISTEN connection was lost with each restart and came back.
    for role in ["api", "sweeper", "relay-1", "relay-2"] {
        let text = log(dir.path(), role);
        let back = text.matches("LISTEN connection re-established").count();
        assert!(
            back >= 2,
            "{role} re-established its LISTEN {back} times:\n{text}"
        );
    }
}

/// A minute of random faults, one every 4 s: roles SIGKILLed and started again, S3 down, S3
/// answers lost after storing, PostgreSQL restarted, each kind and a kill of each role at
/// least once. Nothing confirmed is lost, nothing is announced twice, no job or ledger row is
/// left behind, reconcile with a grace of 0 finds no difference, no role logs an ERROR line
/// outside the expected ones, and the API never answers 500. The seed is random (the report prints it, to repeat a run).
#[tokio::test]
async fn a_minute_of_random_faults_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, report, printed) = soak(&["--seconds", "60", "--every", "4"], dir.path()).await;
    assert_held(ok, &report, &printed);
    let faults = report["faults"].as_array().unwrap();
    assert_eq!(faults.len(), 15, "{printed}");
    // Not by luck: every kind, and a SIGKILL of every role, in every run of a minute.
    for kind in ["kill", "s3-down", "s3-lose", "pg-restart"] {
        assert!(faults.iter().any(|f| f[0] == kind), "no {kind}: {printed}");
    }
    let killed = report["killed"].as_array().unwrap();
    for family in ["api", "sweeper", "worker", "relay"] {
        let kills: u64 = killed
            .iter()
            .filter(|k| k[0].as_str().unwrap().starts_with(family))
            .map(|k| k[1].as_u64().unwrap())
            .sum();
        assert!(kills >= 1, "no {family} was killed: {printed}");
    }
    let uploads = report["presigned"].as_u64().unwrap() + report["tus"].as_u64().unwrap();
    assert!(uploads >= 20, "{printed}");
}
