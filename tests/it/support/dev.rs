//! `vidq dev` as its own process, the way a newcomer runs it: over a fresh database of its
//! own, its data directory (`.vidq-data`) under a directory of the test's, every listener on
//! a free loopback port.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::db::TestDb;
use super::process::{answers_within, free_port, vidq_child};

pub struct Dev {
    /// `http://127.0.0.1:PORT`, the API and the upload page.
    pub base: String,
    /// `127.0.0.1:PORT` of the API.
    pub http_addr: String,
    /// The database it runs on.
    pub database_url: String,
    /// The directory holding `.vidq-data`, where a recipe runs.
    pub home: PathBuf,
    log: PathBuf,
    _child: tokio::process::Child,
    _db: TestDb,
}

impl Dev {
    /// Starts it with `.vidq-data` under `home` and waits until it is ready.
    pub async fn start(home: &Path) -> Self {
        let db = TestDb::new().await;
        let log = home.join("dev.log");
        let http_addr = format!("127.0.0.1:{}", free_port());
        let mut command = vidq_child("dev", &log);
        command
            .current_dir(home)
            .env("DATABASE_URL", &db.url)
            .env("VIDQ_DEV_DATA_DIR", home.join(".vidq-data"))
            .env("VIDQ_HTTP_ADDR", &http_addr)
            .env("VIDQ_DEV_S3_ADDR", format!("127.0.0.1:{}", free_port()))
            .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{}", free_port()))
            .env("VIDQ_RTMP_ADDR", format!("127.0.0.1:{}", free_port()));
        let child = command.spawn().unwrap();
        let base = format!("http://{http_addr}");
        let ready = format!("{base}/readyz");
        let http = reqwest::Client::new();
        let answered = answers_within(&http, &ready, Duration::from_secs(60)).await;
        assert!(
            answered,
            "{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Self {
            base,
            http_addr,
            database_url: db.url.clone(),
            home: home.to_owned(),
            log,
            _child: child,
            _db: db,
        }
    }

    /// What it has logged so far (its banner included).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The API key it made for this run (`.vidq-data/api-key`).
    pub fn key(&self) -> String {
        std::fs::read_to_string(self.home.join(".vidq-data/api-key"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// A counter or gauge from its `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    }
}
