//! How long a player plays a URL, as FFmpeg's own reader sees it.

use serde_json::Value;

/// Seconds a player reads from `url` (ffprobe's container duration).
pub async fn played_seconds(url: &str) -> f64 {
    let probe = tokio::process::Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "format=duration",
            "-of",
            "csv=p=0",
        ])
        .arg(url)
        .output()
        .await
        .unwrap();
    String::from_utf8_lossy(&probe.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| {
            panic!(
                "ffprobe could not read {url}: {}",
                String::from_utf8_lossy(&probe.stderr)
            )
        })
}

/// How many seconds of each video stream a player reads from `url` (last packet's end minus
/// first packet's start), reading every packet of every variant. Panics with FFmpeg's own
/// words if it cannot play.
pub async fn played_seconds_by_stream(url: &str) -> Vec<f64> {
    let out = tokio::process::Command::new("ffprobe")
        .args(["-v", "error", "-of", "json", "-show_entries"])
        .arg("stream=index,codec_type:packet=stream_index,pts_time,duration_time")
        .arg(url)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "ffprobe {url} failed: {stderr}"
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let number = |v: &Value| v.as_str().and_then(|s| s.parse::<f64>().ok());
    json["streams"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["codec_type"] == "video")
        .map(|stream| {
            let (mut first, mut end) = (f64::MAX, f64::MIN);
            for p in json["packets"].as_array().unwrap() {
                if p["stream_index"] == stream["index"]
                    && let Some(pts) = number(&p["pts_time"])
                {
                    first = first.min(pts);
                    end = end.max(pts + number(&p["duration_time"]).unwrap_or(0.0));
                }
            }
            end - first
        })
        .collect()
}
