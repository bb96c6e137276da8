//! The shell recipes of README.md, docs/api.md and docs/live.md, taken from the Markdown
//! itself and run as written against `vidq dev`, so a document that drifts from the product
//! fails here. Every ```` ```sh ```` block of those files runs, in a directory holding the dev
//! run's `.vidq-data`, under `bash -e -o pipefail`, except the two set-up commands of the
//! Quick start (this test is what they start). Only what a test run must change is changed:
//! the ports (the API's `8080` and the receiver's `4000` become free ones), the receiver's
//! database name (one per run), and `cargo run`, which runs the binaries this test run built
//! (a nested cargo would wait on the build directory the test run holds).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::dev::Dev;
use crate::support::process::free_port;
use crate::support::recipes::{count_at, run, sh_blocks};

/// The Quick start's two set-up commands: the only `sh` blocks not run here.
const SETUP_BLOCKS: [&str; 2] = ["scripts/dev", "scripts/test"];

/// A `cargo` that runs what `cargo run -q [--example NAME] -- ARGS` would, from the binaries
/// this test run built; anything else it refuses, so a recipe cannot depend on more.
fn cargo_shim(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let vidq = Path::new(env!("CARGO_BIN_EXE_vidq"));
    let examples = vidq.parent().unwrap().join("examples");
    let script = format!(
        r#"#!/bin/sh
[ "$1" = run ] || {{ echo "cargo shim: only 'cargo run' is known" >&2; exit 90; }}
shift
example=
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case $1 in
    -q) shift ;;
    --example) example=$2; shift 2 ;;
    *) echo "cargo shim: unknown option $1" >&2; exit 91 ;;
  esac
done
[ "$1" = -- ] && shift
if [ -n "$example" ]; then exec "{examples}/$example" "$@"; fi
exec "{vidq}" "$@"
"#,
        examples = examples.display(),
        vidq = vidq.display()
    );
    let path = bin.join("cargo");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[tokio::test]
async fn the_readme_walk_through_and_the_tus_put_and_live_recipes_run_as_written() {
    let home = tempfile::tempdir().unwrap();
    let dev = Dev::start(home.path()).await;
    let bin = cargo_shim(home.path());
    let path = [(
        "PATH",
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    )];
    let receiver_db = format!("vidq_receiver_{}", std::process::id());
    let receiver_port = free_port();
    let substitutions = [
        ("localhost:8080", dev.http_addr.clone()),
        ("127.0.0.1:8080", dev.http_addr.clone()),
        ("127.0.0.1:4000", format!("127.0.0.1:{receiver_port}")),
        ("/vidq_receiver", format!("/{receiver_db}")),
    ];

    let readme = sh_blocks("README.md");
    assert_eq!(
        readme.iter().map(|b| b.trim()).take(2).collect::<Vec<_>>(),
        SETUP_BLOCKS,
        "the Quick start's two set-up commands come first, each a block of its own"
    );
    let mut recipes: Vec<(String, String)> = readme[2..]
        .iter()
        .map(|b| ("README.md".to_owned(), b.clone()))
        .collect();
    for file in ["docs/api.md", "docs/live.md"] {
        for block in sh_blocks(file) {
            assert!(!SETUP_BLOCKS.contains(&block.trim()), "{file}");
            recipes.push((file.to_owned(), block));
        }
    }
    assert_eq!(
        recipes.len(),
        5,
        "walk-through, tus, single PUT, RTMP live, HLS live"
    );

    let receiver_url = vidq::db::pool::with_database(&dev.database_url, &receiver_db).unwrap();
    for (file, block) in &recipes {
        let ran = run(&dev.home, block, &substitutions, &path).await;
        eprintln!("=== {file}\n{}", ran.output);
        if !ran.success {
            ran.stop_what_is_left();
            panic!(
                "a recipe of {file} failed:\n{block}\n{}\n{}",
                ran.output,
                dev.log()
            );
        }
        let expected: &[&str] = match block {
            b if b.contains("webhook_receiver") => &["\"status\": \"ready\"", "5.0"],
            b if b.contains("/v1/tus/") => &["HTTP/1.1 201", "Upload-Offset", "\"confirmed\""],
            b if b.contains("\"via\\\":\\\"vidq\\\"") => &["\"pending\"", "\"confirmed\""],
            b if b.contains("-f flv") => &["h264", "\"state\": \"ready\""],
            b if b.contains("-method PUT") => &["\"state\": \"ready\"", "\"endlist\""],
            _ => panic!("a recipe this test does not know what to expect from:\n{block}"),
        };
        if block.contains("webhook_receiver") {
            // The walk-through's receiver acts on `video.ready` once, in a database of its
            // own; the relay may deliver it a moment after the status read said ready.
            let ready = "SELECT count(*) AS n FROM ready_videos";
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while count_at(&receiver_url, ready).await == 0 && std::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            assert_eq!(count_at(&receiver_url, ready).await, 1, "{}", ran.output);
        }
        ran.stop_what_is_left();
        // Header names as HTTP/1.1 servers send them: in any case.
        let printed = ran.output.to_lowercase();
        for needle in expected {
            assert!(
                printed.contains(&needle.to_lowercase()),
                "{file}: no {needle} in what the recipe printed:\n{}",
                ran.output
            );
        }
    }
    vidq::db::provision::drop_database(&receiver_url)
        .await
        .unwrap();
}
