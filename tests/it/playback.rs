//! Playback with a real player (FFmpeg's HLS demuxer) against the private bucket: the
//! `hls_url` of a READY video plays its whole duration, single rendition and ladder; tokens
//! that expired, belong to another video or were altered are refused without leaking keys;
//! with `VIDQ_PUBLIC_BASE_URL` the URLs are plain and play through a public front.

use std::sync::Arc;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use reqwest::StatusCode;
use serde_json::Value;
use vidq::adapters::ffmpeg::MediaConfig;
use vidq::adapters::storage::Storage;
use vidq::pipeline::Pipeline;

use crate::support::app::{TEST_BUCKET, TestApp, TestAppOptions, assert_error};
use crate::support::clips;
use crate::support::pipeline::upload_clip;
use crate::support::playback::played_seconds_by_stream;
use crate::support::queue::{Worker, fast_settings, video_id};
use crate::support::wait::wait_for_count;

/// Uploads the small clip and runs a real worker on it until the video is READY; returns
/// the video as `GET /v1/videos/{id}` shows it.
async fn ready_video(app: &TestApp, key: &str, media: MediaConfig) -> Value {
    let video = upload_clip(app, key, &clips::small()).await;
    let id = video_id(&video);
    let work = tempfile::tempdir().unwrap();
    let body = Arc::new(Pipeline {
        storage: app.storage.clone(),
        db: app.pool.clone(),
        media,
        work_root: work.path().to_owned(),
        waits: Default::default(),
    });
    let worker = Worker::start(&app.db.url, body, fast_settings("player-test")).await;
    wait_for_count(
        app,
        &format!("SELECT count(*) AS n FROM videos WHERE id = '{id}' AND status = 'ready'"),
        1,
        Duration::from_secs(120),
    )
    .await;
    worker.stop().await;
    app.video(key, &id).await
}

/// Asserts that `url` plays every one of `variants` video streams for the clip's whole length.
async fn assert_plays_whole_clip(url: &str, variants: usize) {
    let source = played_seconds_by_stream(clips::small().to_str().unwrap()).await[0];
    let played = played_seconds_by_stream(url).await;
    assert_eq!(played.len(), variants, "{played:?}");
    for seconds in played {
        // One frame (40 ms at 25 fps) of slack for rounding at the ends.
        assert!(
            (seconds - source).abs() <= 0.05,
            "played {seconds} s of a {source} s clip"
        );
    }
}

/// The response is an error body that names no object, bucket or signature.
async fn assert_refused_without_leaks(response: reqwest::Response, status: StatusCode) {
    let code = if status == StatusCode::FORBIDDEN {
        "invalid_token"
    } else {
        "not_found"
    };
    let body = assert_error(response, status, code).await.to_string();
    // The message may name the API route `/v1/videos/{id}`, never an object key.
    for secret in [
        "/a1/",
        "hls/",
        "originals/",
        TEST_BUCKET,
        "X-Amz",
        ".m4s",
        "init.mp4",
        "index.m3u8",
    ] {
        assert!(!body.contains(secret), "{secret} in {body}");
    }
}

/// `url` with its query replaced by `?token={token}`.
fn with_token(url: &str, token: &str) -> String {
    format!("{}?token={token}", url.split('?').next().unwrap())
}

/// `token` with the first character of its MAC changed.
fn altered(token: &str) -> String {
    let (expires, mac) = token.split_once('.').unwrap();
    let first = if mac.starts_with('A') { 'B' } else { 'A' };
    format!("{expires}.{first}{}", &mac[1..])
}

#[tokio::test]
async fn the_hls_url_of_a_ready_video_plays_its_whole_duration_from_the_private_bucket() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = ready_video(&app, &key, MediaConfig::default()).await;
    let id = video_id(&video);
    let hls_url = video["playback"]["hls_url"].as_str().unwrap();
    assert!(
        hls_url.starts_with(&app.url(&format!("/v1/videos/{id}/hls.m3u8?token="))),
        "{hls_url}"
    );

    assert_plays_whole_clip(hls_url, 1).await;

    let served = app.http.get(hls_url).send().await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(
        served.headers()["content-type"],
        "application/vnd.apple.mpegurl"
    );
    let cache = served.headers()["cache-control"].to_str().unwrap();
    assert!(
        cache.contains("private") && cache.contains("max-age=60"),
        "{cache}"
    );
    let text = served.text().await.unwrap();
    assert!(text.contains("#EXT-X-MAP:URI=\"http"), "{text}");
    assert!(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .all(|l| l.contains("X-Amz-Signature=")),
        "every segment presigned: {text}"
    );

    // The MP4 and thumbnail URLs stay presigned object URLs and keep working.
    let mp4 = app
        .http
        .get(video["playback"]["mp4_url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(mp4.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_ladder_plays_every_rendition_through_variant_playlists_served_by_vidq() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let ladder = MediaConfig {
        ladder: vec![240, 120],
        ..MediaConfig::default()
    };
    let video = ready_video(&app, &key, ladder).await;
    let id = video_id(&video);
    let hls_url = video["playback"]["hls_url"].as_str().unwrap();
    let token = hls_url.split_once("?token=").unwrap().1;

    let master = app.http.get(hls_url).send().await.unwrap();
    assert_eq!(master.status(), StatusCode::OK);
    let master = master.text().await.unwrap();
    let variants: Vec<&str> = master.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        variants,
        vec![
            format!("hls/v0.m3u8?token={token}"),
            format!("hls/v1.m3u8?token={token}")
        ],
        "{master}"
    );

    assert_plays_whole_clip(hls_url, 2).await;

    // A variant's token is checked like the master's, and only renditions that exist are
    // served.
    let variant = app.url(&format!("/v1/videos/{id}/hls/v1.m3u8"));
    assert_eq!(
        app.http
            .get(with_token(&variant, token))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_refused_without_leaks(
        app.http
            .get(with_token(&variant, &altered(token)))
            .send()
            .await
            .unwrap(),
        StatusCode::FORBIDDEN,
    )
    .await;
    let missing = app.url(&format!("/v1/videos/{id}/hls/v7.m3u8?token={token}"));
    assert_refused_without_leaks(
        app.http.get(missing).send().await.unwrap(),
        StatusCode::NOT_FOUND,
    )
    .await;
}

#[tokio::test]
async fn expired_foreign_altered_and_missing_tokens_are_refused_and_leak_nothing() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = ready_video(&app, &key, MediaConfig::default()).await;
    let id = video_id(&video);
    let hls_url = video["playback"]["hls_url"].as_str().unwrap().to_owned();
    let token = hls_url.split_once("?token=").unwrap().1.to_owned();
    let get = async |url: String| app.http.get(url).send().await.unwrap();

    // Signed with the server's own key, for this video, but an hour ago.
    let expired = app
        .ctx
        .playback
        .key
        .sign(id, chrono::Utc::now() - chrono::Duration::hours(1));
    let response = get(with_token(&hls_url, &expired)).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{body}"
    );

    // This video's token on another of the same owner's videos, and on an unknown id: the
    // token is refused before anything is looked up, so neither says whether it exists.
    let other = crate::support::pipeline::upload_clip(&app, &key, &clips::small()).await;
    let other_id = video_id(&other);
    for path in [
        format!("/v1/videos/{other_id}/hls.m3u8?token={token}"),
        format!("/v1/videos/{}/hls.m3u8?token={token}", uuid::Uuid::now_v7()),
        format!("/v1/videos/{other_id}/hls/v0.m3u8?token={token}"),
    ] {
        assert_refused_without_leaks(get(app.url(&path)).await, StatusCode::FORBIDDEN).await;
    }

    // Altered: a later expiry with the same MAC, and a changed MAC.
    let (expires, mac) = token.split_once('.').unwrap();
    let extended = format!("{}.{mac}", expires.parse::<i64>().unwrap() + 86_400);
    let flipped = altered(&token);
    for bad in [&extended, &flipped, "", "garbage"] {
        assert_refused_without_leaks(get(with_token(&hls_url, bad)).await, StatusCode::FORBIDDEN)
            .await;
    }
    let no_token = hls_url.split_once('?').unwrap().0.to_owned();
    assert_refused_without_leaks(get(no_token).await, StatusCode::FORBIDDEN).await;

    // The genuine token still works, and the API key is not what authorizes the playlist.
    assert_eq!(get(hls_url.clone()).await.status(), StatusCode::OK);
    // Once the video is deleted its token opens nothing.
    assert_eq!(
        app.delete(&key, &format!("/v1/videos/{id}")).await.status(),
        StatusCode::NO_CONTENT
    );
    assert_refused_without_leaks(get(hls_url).await, StatusCode::NOT_FOUND).await;
}

/// A stand-in for a CDN in front of the bucket: serves any object under `/media/` publicly.
async fn public_front(listener: std::net::TcpListener, storage: Storage) {
    let server = actix_web::HttpServer::new(move || {
        let storage = storage.clone();
        actix_web::App::new().default_service(web::to(move |req: HttpRequest| {
            let storage = storage.clone();
            async move {
                let Some(key) = req.path().strip_prefix("/media/") else {
                    return HttpResponse::NotFound().finish();
                };
                match storage.get_bytes(key).await.unwrap() {
                    Some(bytes) => HttpResponse::Ok().body(bytes),
                    None => HttpResponse::NotFound().finish(),
                }
            }
        }))
    })
    .listen(listener)
    .unwrap()
    .workers(1)
    .disable_signals()
    .run();
    tokio::spawn(server);
}

#[tokio::test]
async fn with_a_public_base_url_playback_urls_are_plain_and_play() {
    let front = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/media", front.local_addr().unwrap());
    let app = TestApp::spawn_with(TestAppOptions {
        public_base_url: Some(base.clone()),
        ..TestAppOptions::default()
    })
    .await;
    public_front(front, app.storage.clone()).await;
    let key = app.create_user("alice").await;
    let video = ready_video(&app, &key, MediaConfig::default()).await;
    let id = video_id(&video);
    let playback = &video["playback"];
    for (field, name) in [
        ("hls_url", "hls/index.m3u8"),
        ("mp4_url", "video.mp4"),
        ("thumbnail_url", "thumb.jpg"),
    ] {
        let url = playback[field].as_str().unwrap();
        assert!(
            url.starts_with(&format!("{base}/videos/{id}/")) && url.ends_with(name),
            "{field}: {url}"
        );
        assert!(!url.contains('?'), "{field} is plain: {url}");
    }
    assert_plays_whole_clip(playback["hls_url"].as_str().unwrap(), 1).await;
}

#[tokio::test]
async fn api_help_explains_the_playback_settings_and_a_short_secret_is_refused() {
    let help = crate::support::cli::vidq(&["api", "--help"], &[]).await;
    let text = String::from_utf8_lossy(&help.stdout);
    for variable in ["VIDQ_PLAYBACK_SECRET", "VIDQ_PUBLIC_BASE_URL"] {
        assert!(
            text.contains(variable),
            "{variable} missing from api --help"
        );
    }
    assert!(
        text.contains("same one"),
        "the multi-node rule is stated: {text}"
    );
    let env = [
        ("DATABASE_URL", "postgres://localhost/x"),
        ("VIDQ_S3_BUCKET", "vidq-media"),
    ];
    for (name, value) in [
        ("VIDQ_PLAYBACK_SECRET", "too-short"),
        ("VIDQ_PUBLIC_BASE_URL", "ftp://media.example.com"),
    ] {
        let mut env = env.to_vec();
        env.push((name, value));
        let out = crate::support::cli::vidq(&["api"], &env).await;
        assert!(!out.status.success());
        let said = crate::support::cli::stderr(&out);
        assert!(said.contains(name), "{said}");
        if name == "VIDQ_PLAYBACK_SECRET" {
            assert!(!said.contains(value), "the secret is never printed: {said}");
        }
    }
}

/// vidq presigns GETs without the SDK's request pipeline (`adapters::presign`); its URLs must
/// be the SDK's own for the same key, time and lifetime, and S3 must serve them, for keys
/// with characters that need encoding too.
#[tokio::test]
async fn fast_presigned_get_urls_are_the_sdks_and_s3_serves_them() {
    let app = TestApp::spawn().await;
    let at = std::time::SystemTime::now();
    let ttl = Duration::from_secs(900);
    for key in [
        "videos/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/r1/a1/video.mp4",
        "odd keys/a b+c/ü~(1)%.mp4",
    ] {
        app.storage
            .put_bytes(key, b"presigned body".to_vec(), "video/mp4")
            .await
            .unwrap();
        let ours = app
            .storage
            .fast_presign_get_at(key, ttl, at)
            .await
            .expect("the test S3's URL shape is learned");
        let sdk = app
            .storage
            .sdk_presign_get(key, ttl, Some(at))
            .await
            .unwrap();
        let parts = |url: &str| {
            let url = url::Url::parse(url).unwrap();
            let mut query: Vec<(String, String)> = url.query_pairs().into_owned().collect();
            query.sort();
            (
                url.origin().ascii_serialization(),
                url.path().to_owned(),
                query,
            )
        };
        assert_eq!(parts(&ours), parts(&sdk), "{key}");
        let fetched = reqwest::get(app.storage.presign_get(key, ttl).await.unwrap())
            .await
            .unwrap();
        assert_eq!(fetched.status(), StatusCode::OK, "{key}");
        assert_eq!(fetched.bytes().await.unwrap().as_ref(), b"presigned body");
    }
}
