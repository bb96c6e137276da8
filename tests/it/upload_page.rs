//! The upload page at `/`, as a web developer meets it: `vidq dev` as its own process, and
//! Debian's headless Chromium (tests/clients/upload_page.mjs) that finds the key filled in,
//! uploads a clip on a throttled link, is reloaded half way and resumes from the server's
//! offset, sees the video READY and plays it through MSE, plays it again from a page on
//! another origin, and plays a live broadcast FFmpeg publishes to the RTMP server and key
//! the page shows. The page's own answers (its headers, the vendored scripts, a key that
//! cannot break out of its attribute) are checked without a browser.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::clients::clients_dir;
use crate::support::clips;
use crate::support::dev::Dev;

#[tokio::test]
async fn a_browser_uploads_resumes_after_a_reload_plays_from_two_origins_and_goes_live() {
    let home = tempfile::tempdir().unwrap();
    let dev = Dev::start(home.path()).await;
    let clip = clips::video(10, 960, 540);
    let size = std::fs::metadata(&clip).unwrap().len();
    let live_source = clips::broadcast(40);
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("upload-page");
    std::fs::create_dir_all(&shots).unwrap();

    let mut browser = tokio::process::Command::new("node")
        .arg(clients_dir().join("upload_page.mjs"))
        .arg(&dev.base)
        .arg(&clip)
        .arg(&live_source)
        .arg(&shots)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (npm ci --prefix tests/clients)");
    let mut lines = BufReader::new(browser.stdout.take().unwrap()).lines();
    let mut steps = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            eprintln!("upload page: {line}");
            steps.push(line);
        }
    };
    tokio::time::timeout(Duration::from_secs(480), read)
        .await
        .unwrap_or_else(|_| panic!("the browser took too long; steps {steps:?}\n{}", dev.log()));
    let status = browser.wait().await.unwrap();
    assert!(
        status.success() && steps.last().is_some_and(|s| s == "step done"),
        "steps {steps:?}\n{}",
        dev.log()
    );
    let value_of = |name: &str| {
        steps
            .iter()
            .find_map(|s| s.strip_prefix(&format!("step {name} ")))
            .unwrap_or_else(|| panic!("no step {name} in {steps:?}"))
            .to_owned()
    };
    let reloaded_at: u32 = value_of("reloading-at").parse().unwrap();
    assert!((45..100).contains(&reloaded_at), "{reloaded_at}");
    let played: f64 = value_of("played").parse().unwrap();
    assert!(played >= 3.0, "{played}");
    let cross_origin: f64 = value_of("played-cross-origin").parse().unwrap();
    assert!(cross_origin >= 3.0, "{cross_origin}");
    let live: f64 = value_of("live-playing").parse().unwrap();
    assert!(live >= 2.0, "{live}");

    // The reload cost less than half the file again: the upload went on from the offset the
    // server held, it did not start over.
    let received = dev.metric("vidq_upload_body_bytes_total").await as u64;
    assert!(
        received >= size && received * 2 < size * 3,
        "the server read {received} bytes of body for a {size}-byte file"
    );
    for shot in [
        "upload-half-way.png",
        "upload-ready-playing.png",
        "live-playing.png",
    ] {
        assert!(shots.join(shot).exists(), "{shot}");
    }
}

#[tokio::test]
async fn the_page_fills_in_only_the_dev_key_and_serves_its_scripts_from_the_binary() {
    let home = tempfile::tempdir().unwrap();
    let dev = Dev::start(home.path()).await;
    let client = reqwest::Client::new();
    let page = client.get(format!("{}/", dev.base)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers().clone();
    assert_eq!(headers["cache-control"], "no-store");
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    let html = page.text().await.unwrap();
    let at = html.find("name=\"vidq-key\" content=\"").unwrap() + 25;
    let key = &html[at..at + html[at..].find('"').unwrap()];
    assert!(key.starts_with("vidq_"), "{key}");
    // The key filled in is a working key of the dev user, and the banner says so.
    let videos = client
        .get(format!("{}/v1/videos", dev.base))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(videos.status(), 200);
    assert!(dev.log().contains(key), "{}", dev.log());
    assert_eq!(dev.key(), key, "the key file holds the page's key");
    use std::os::unix::fs::PermissionsExt;
    let key_file = std::fs::metadata(home.path().join(".vidq-data/api-key")).unwrap();
    assert_eq!(
        key_file.permissions().mode() & 0o777,
        0o600,
        "only its user reads it"
    );
    for (path, marker) in [
        ("/ui/vendor/hls.light.min.js", "Hls"),
        ("/ui/vendor/tus.min.js", "tus"),
        ("/ui/vendor/LICENSES.txt", "Apache License"),
        ("/ui/page.js", "findPreviousUploads"),
    ] {
        let answer = client
            .get(format!("{}{path}", dev.base))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        assert!(answer.text().await.unwrap().contains(marker), "{path}");
    }
    // The served scripts are the vendored files, byte for byte.
    let vendored = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/page/vendor/tus.min.js"),
    )
    .unwrap();
    let served = client
        .get(format!("{}/ui/vendor/tus.min.js", dev.base))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(served.as_ref(), vendored.as_slice());
}

#[tokio::test]
async fn a_deployed_api_serves_the_page_with_no_key_in_it() {
    let app = crate::support::app::TestApp::spawn().await;
    let html = reqwest::get(app.url("/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        html.contains("<meta name=\"vidq-key\" content=\"\">"),
        "{html}"
    );
}
