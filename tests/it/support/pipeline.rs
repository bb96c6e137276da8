//! The real encoding pipeline against a test app, and a real clip uploaded and confirmed.

use reqwest::StatusCode;
use serde_json::Value;
use vidq::adapters::ffmpeg::MediaConfig;
use vidq::pipeline::Pipeline;

use crate::support::app::TestApp;

/// Uploads and confirms a real clip; returns the video JSON.
pub async fn upload_clip(app: &TestApp, key: &str, clip: &std::path::Path) -> Value {
    let bytes = std::fs::read(clip).unwrap();
    let upload = app.create_upload(key, bytes.len()).await;
    assert!(app.put_to(&upload, bytes).await.status().is_success());
    let response = app
        .confirm(key, upload["upload_id"].as_str().unwrap())
        .await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    response.json().await.unwrap()
}

pub fn pipeline(app: &TestApp, work_root: &std::path::Path) -> Pipeline {
    Pipeline {
        storage: app.storage.clone(),
        db: app.pool.clone(),
        media: MediaConfig::default(),
        work_root: work_root.to_owned(),
        waits: Default::default(),
    }
}
