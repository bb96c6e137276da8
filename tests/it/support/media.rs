//! ffprobe's view of files the tests made, and the processes still running for them.

use std::path::Path;

/// ffprobe's facts about the first video stream of `path`.
pub async fn video_stream(path: &Path) -> serde_json::Value {
    let out = tokio::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_streams",
            "-of",
            "json",
        ])
        .arg(path)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{} decodes", path.display());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["streams"][0].clone()
}

/// ffprobe's view of an image: (width, height); asserts it is a JPEG.
pub async fn probe_image(path: &Path) -> (i64, i64) {
    let stream = video_stream(path).await;
    assert_eq!(stream["codec_name"], "mjpeg");
    (
        stream["width"].as_i64().unwrap(),
        stream["height"].as_i64().unwrap(),
    )
}

/// Pids of live processes whose command line mentions `marker`.
pub fn processes_mentioning(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(marker) {
            let state = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // A zombie is dead; only running processes count.
            if !state.contains(") Z ") {
                found.push(pid);
            }
        }
    }
    found
}
