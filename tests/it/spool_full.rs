//! A full spool disk: the spool is a 4 MiB tmpfs the test mounts (skipped, with a message,
//! where mounting is not allowed). A tus PATCH and a single PUT that run out of space answer
//! `507 insufficient_storage`, keep the offset at the bytes counted before, and give back the
//! space they used; a live segment is refused the same way; the sweeper lands what is there,
//! which frees space, and the tus upload then goes on to its end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::app::{TestApp, TestAppOptions};
use crate::support::tus;

const MIB: usize = 1024 * 1024;

/// A tmpfs of `size` mounted for the test, unmounted when dropped.
struct Mounted {
    path: PathBuf,
    _parent: tempfile::TempDir,
}

impl Mounted {
    /// Mounts it, or fails the test with what is missing: it needs root (or
    /// `CAP_SYS_ADMIN`), as `.ci/run` has.
    fn tmpfs(size: &str) -> Self {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("spool-disk");
        std::fs::create_dir(&path).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("`mount` (util-linux) runs");
        assert!(
            mounted.status.success(),
            "this test fills a spool disk of its own, a {size} tmpfs, and could not mount one \
             ({}): run the suite as root, as .ci/run does",
            String::from_utf8_lossy(&mounted.stderr).trim()
        );
        Self {
            path,
            _parent: parent,
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// Sizes of the files under `dir`.
fn file_sizes(dir: &Path) -> Vec<u64> {
    let mut sizes = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sizes.extend(file_sizes(&path));
        } else {
            sizes.push(entry.metadata().unwrap().len());
        }
    }
    sizes
}

async fn put(app: &TestApp, key: &str, url: &str, body: Vec<u8>) -> reqwest::Response {
    app.http
        .put(url)
        .bearer_auth(key)
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn expect_507(answer: reqwest::Response) {
    assert_eq!(answer.status(), StatusCode::INSUFFICIENT_STORAGE);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
}

#[tokio::test]
async fn a_full_spool_answers_507_keeps_what_was_counted_and_takes_bytes_again_once_the_sweeper_frees_space()
 {
    let disk = Mounted::tmpfs("4m");
    let app = TestApp::spawn_with(TestAppOptions {
        spool_in: Some(disk.path.clone()),
        ..Default::default()
    })
    .await;
    let key = app.create_user("alice").await;

    // A finished single PUT waits on the spool: nothing lands it yet.
    let (first, first_url) = app.vidq_contract(&key, 3 * MIB / 2).await;
    let first_bytes = bytes(3 * MIB / 2, 1);
    assert_eq!(
        put(&app, &key, &first_url, first_bytes.clone())
            .await
            .status(),
        StatusCode::OK
    );

    // A tus upload of 3 MiB in 256 KiB PATCHes runs out of space part way.
    let total = 3 * MIB;
    let file = bytes(total, 2);
    let url = tus::create(&app, &key, total).await;
    let chunk = 256 * 1024;
    let mut offset = 0;
    loop {
        let end = (offset + chunk).min(total);
        let answer = tus::patch(&app, &key, &url, offset, &file[offset..end], None).await;
        if answer.status() == StatusCode::NO_CONTENT {
            offset = end;
            assert!(offset < total, "the disk never filled");
            continue;
        }
        expect_507(answer).await;
        break;
    }
    assert!(offset > 0, "some PATCHes fit");
    assert_eq!(tus::offset_of(&app, &key, &url).await, offset as u64);
    // The refused PATCH gave its space back: the upload's file holds just what is counted.
    let sizes = file_sizes(&disk.path);
    assert!(
        sizes.contains(&(offset as u64)),
        "{sizes:?} against {offset}"
    );

    // A single PUT and a live segment are refused the same way, nothing kept.
    let (_, second_url) = app.vidq_contract(&key, MIB).await;
    expect_507(put(&app, &key, &second_url, bytes(MIB, 3)).await).await;
    let recording = crate::support::live::create_recording(&app, &key).await;
    let ingest = recording["ingest_url"].as_str().unwrap();
    let segment = app
        .http
        .put(format!("{ingest}init.mp4"))
        .body(bytes(MIB, 4))
        .send()
        .await
        .unwrap();
    expect_507(segment).await;
    assert_eq!(
        app.count("SELECT count(*) AS n FROM recording_files").await,
        0
    );

    // The sweeper lands the finished upload and removes its spool file: the tus upload
    // goes on from its offset to its end.
    app.start_sweeper(
        app.storage.clone(),
        crate::support::sweeper::woken_sweeper(),
    )
    .await;
    assert_eq!(landed(&app, &first).await, first_bytes);
    // Its spool file goes a moment after the object lands: a client retries a 507 later.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while offset < total {
        let end = (offset + chunk).min(total);
        let answer = tus::patch(&app, &key, &url, offset, &file[offset..end], None).await;
        match answer.status() {
            StatusCode::NO_CONTENT => offset = end,
            StatusCode::INSUFFICIENT_STORAGE if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("at {offset}: {other}"),
        }
    }
    let id = tus::upload_id(&url);
    assert!(
        landed(&app, &id).await == file,
        "the object is the file, byte for byte"
    );
}

/// The object of upload `id` once the sweeper has landed it.
async fn landed(app: &TestApp, id: &str) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(stored) = app
            .storage
            .get_bytes(&format!("originals/{id}"))
            .await
            .unwrap()
        {
            return stored;
        }
        assert!(tokio::time::Instant::now() < deadline, "{id} never landed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
