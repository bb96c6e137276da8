//! `vidq dev` on a machine with PostgreSQL installed but not running: it starts a private
//! server under its data directory on a free port, and stops it when it exits. Its API's
//! `/metrics` also carries the in-process worker's families.

use std::time::{Duration, Instant};

use crate::support::process::{free_port, vidq_child};

/// Runs `vidq dev --postgres private` with 3 worker slots until its API is ready (its
/// database answers), scrapes its `/metrics`, then stops it with SIGTERM; returns its log
/// and the scrape.
async fn dev_once(data: &std::path::Path, log: &std::path::Path) -> (String, String) {
    let http = free_port();
    let mut command = vidq_child("dev", log);
    command
        .args(["--postgres", "private"])
        .env("VIDQ_DEV_DATA_DIR", data)
        .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{http}"))
        .env("VIDQ_DEV_S3_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("VIDQ_SLOTS", "3");
    let mut dev = command.spawn().unwrap();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ready = client
            .get(format!("http://127.0.0.1:{http}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let scrape = client.get(format!("http://127.0.0.1:{http}/metrics"));
    let metrics = scrape.send().await.unwrap().text().await.unwrap();
    let pid = dev.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::time::timeout(Duration::from_secs(60), dev.wait())
        .await
        .expect("vidq dev stops")
        .unwrap();
    assert!(status.success(), "{status}");
    (std::fs::read_to_string(log).unwrap(), metrics)
}

#[tokio::test]
async fn vidq_dev_starts_a_private_postgres_under_its_data_dir_and_stops_it_on_exit() {
    let dir = tempfile::tempdir().unwrap();
    // The server may run as another user (as root: `postgres`), which must reach the cluster.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    let (first, metrics) = dev_once(&data, &dir.path().join("dev-1.log")).await;
    // The banner and the worker's own gauges say the slots asked for; the API's families
    // are there beside them.
    assert!(first.contains("worker      3 slots"), "{first}");
    assert!(metrics.contains("vidq_worker_slots 3"), "{metrics}");
    assert!(metrics.contains("vidq_worker_database_up"), "{metrics}");
    assert!(metrics.contains("vidq_database_up 1"), "{metrics}");
    assert!(
        first.contains("created a private PostgreSQL cluster"),
        "{first}"
    );
    assert!(first.contains("private PostgreSQL started"), "{first}");
    assert!(first.contains("private PostgreSQL stopped"), "{first}");
    let pg = data.join("pg");
    assert!(pg.join("PG_VERSION").exists());
    assert!(!pg.join("postmaster.pid").exists(), "the server is stopped");
    // A second run keeps the cluster (and its data) and starts it again.
    let (second, _) = dev_once(&data, &dir.path().join("dev-2.log")).await;
    assert!(
        !second.contains("created a private PostgreSQL cluster"),
        "{second}"
    );
    assert!(second.contains("private PostgreSQL started"), "{second}");
    assert!(
        second.contains("database schema is up to date applied=0"),
        "{second}"
    );
    assert!(!pg.join("postmaster.pid").exists());
}

#[tokio::test]
async fn as_root_in_a_directory_the_postgres_user_cannot_enter_vidq_dev_still_starts() {
    assert!(
        is_root(),
        "this test has `vidq dev` run its private PostgreSQL as another user, which only root \
         can: run the suite as root, as .ci/run does"
    );
    // A project under a directory only root may enter, as `/root` is (mode 700).
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let data = dir.path().join("project").join("data");
    let (log, metrics) = dev_once(&data, &dir.path().join("dev.log")).await;
    assert!(metrics.contains("vidq_database_up 1"), "{metrics}");
    assert!(
        log.contains("the PostgreSQL user cannot enter the dev data directory"),
        "{log}"
    );
    assert!(log.contains("private PostgreSQL stopped"), "{log}");
    // The cluster went under /var/tmp, named after the data directory; the test removes it.
    let marker = "dir=/var/tmp/vidq-dev-postgres/";
    let at = log
        .find(marker)
        .expect("the log names where the cluster is")
        + "dir=".len();
    let cluster: String = log[at..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    let cluster = std::path::Path::new(&cluster);
    assert!(cluster.join("PG_VERSION").exists(), "{}", cluster.display());
    assert!(
        !cluster.join("postmaster.pid").exists(),
        "the server is stopped"
    );
    std::fs::remove_dir_all(cluster).unwrap();
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}
