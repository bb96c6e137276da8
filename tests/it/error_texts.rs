//! What leaves the node when an encoding fails: a code and a fixed sentence (plus, for a
//! refused file, FFmpeg's reason without paths), never a path of the node, in the status API,
//! the database, or the event a webhook or the feed carries.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use vidq::adapters::ffmpeg::MediaConfig;
use vidq::domain::failure::strip_paths;

use crate::support::app::TestApp;
use crate::support::feed::feed;
use crate::support::pipeline::pipeline;
use crate::support::queue::{Worker, fast_settings, video_id};
use crate::support::wait::wait_for_count;

/// A piece of a filesystem path: `/[A-Za-z0-9_.-]+/`.
fn has_path(text: &str) -> bool {
    let named = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
    text.match_indices('/').any(|(at, _)| {
        let rest = &text[at + 1..];
        let name = rest.len() - rest.trim_start_matches(named).len();
        name > 0 && rest[name..].starts_with('/')
    })
}

#[test]
fn the_path_check_sees_paths_and_none_are_left_after_strip_paths() {
    assert!(has_path("at /tmp/x/y"));
    assert!(!has_path(&strip_paths(
        "a /usr/bin/ffprobe b ./rel/x c ../up/y d ~/home/z e out/hls/v0/init.mp4"
    )));
}

/// Where `ffprobe` is on PATH, as an operator would write it in `VIDQ_FFPROBE`.
fn ffprobe_on_path() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|dir| dir.join("ffprobe"))
        .find(|path| path.is_file())
        .expect("ffprobe is installed")
}

async fn texts(app: &TestApp, sql: &str) -> Vec<String> {
    #[derive(QueryableByName)]
    struct T {
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
        t: Option<String>,
    }
    let mut conn = app.pool.get().await.unwrap();
    let rows: Vec<T> = diesel::sql_query(sql).load(&mut conn).await.unwrap();
    rows.into_iter().filter_map(|r| r.t).collect()
}

/// Runs a non-video upload through a worker whose media settings `configure` changed, until
/// its video fails; checks that the code is `code` and that no text about the failure that
/// leaves the node names a path. Returns the video's `error.message` from the API.
async fn fails_without_paths(configure: impl FnOnce(&mut MediaConfig), code: &str) -> String {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let id = video_id(&app.uploaded_video(&key).await);
    let work = tempfile::tempdir().unwrap();
    let mut body = pipeline(&app, work.path());
    configure(&mut body.media);
    let worker = Worker::start(&app.db.url, Arc::new(body), fast_settings("n")).await;
    wait_for_count(
        &app,
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'failed'"),
        1,
        Duration::from_secs(30),
    )
    .await;
    worker.stop().await;

    let api = app.video(&key, &id).await;
    assert_eq!(api["error"]["code"], code, "{api}");
    let events = feed(&app, &key, 2).await;
    let failed = events.iter().find(|e| e["type"] == "video.failed").unwrap();
    assert_eq!(failed["data"]["error"]["code"], code);
    let mut leaving = vec![api.to_string(), failed.to_string()];
    leaving.extend(texts(&app, "SELECT error_message AS t FROM videos").await);
    leaving.extend(texts(&app, "SELECT payload::text AS t FROM notification_outbox").await);
    leaving.extend(texts(&app, "SELECT error_message AS t FROM job_attempts").await);
    leaving.extend(texts(&app, "SELECT last_error AS t FROM video_encoding_jobs").await);
    for text in &leaving {
        assert!(!has_path(text), "a node path leaves the node: {text}");
    }
    api["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_missing_tool_is_reported_without_its_path() {
    let message = fails_without_paths(
        |media| media.ffprobe = "/nonexistent/vidq-tools/ffprobe".into(),
        "ffmpeg_missing",
    )
    .await;
    assert_eq!(
        message,
        "the media tools are not available on the processing node"
    );
}

#[tokio::test]
async fn a_timeout_is_reported_without_the_tools_path() {
    let message = fails_without_paths(
        |media| {
            media.ffprobe = ffprobe_on_path();
            media.call_timeout = Duration::from_millis(1);
        },
        "probe_timeout",
    )
    .await;
    assert_eq!(message, "reading the video took too long");
}

#[tokio::test]
async fn a_refused_file_is_reported_with_ffmpegs_reason_and_no_path() {
    let message = fails_without_paths(|_| {}, "invalid_media").await;
    assert!(
        message.starts_with("the file is not a video that can be read: ")
            && message.contains("Invalid data found"),
        "{message}"
    );
}
