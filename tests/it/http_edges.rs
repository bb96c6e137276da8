//! Edges a client trips on: ambiguous credentials, wrong methods, HEAD probes, the shape and
//! wording of errors the HTTP layer makes, oversized and stalled bodies, too many
//! connections from one address, what the access log says, and webhook registrations that
//! can never work.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use vidq::config::HttpLimits;

use crate::support::app::{TestApp, assert_error};

/// Asserts the JSON error shape and that the message names no Rust type; returns the message.
async fn error_message(response: reqwest::Response, status: StatusCode, code: &str) -> String {
    let body = assert_error(response, status, code).await;
    let message = body["error"]["message"].as_str().unwrap().to_owned();
    for internal in [
        "struct",
        "Request",
        "i64",
        "u64",
        "Json deserialize",
        "Query",
    ] {
        assert!(!message.contains(internal), "{message:?} names {internal}");
    }
    message
}

/// The app's API served again with `limits`; stops when the guard drops.
fn serve_with(app: &TestApp, limits: HttpLimits) -> (String, tokio_util::sync::DropGuard) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let server = vidq::http::serve_with(listener, app.ctx.clone(), limits, shutdown.clone());
    tokio::spawn(server.unwrap());
    (addr, shutdown.drop_guard())
}

/// Reads one HTTP/1.1 response (head and a `content-length` body) from `stream`.
async fn read_response(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return text;
            }
        }
        let n = stream.read(&mut chunk).await.unwrap();
        if n == 0 {
            return String::from_utf8_lossy(&buf).into_owned();
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn two_authorization_headers_are_refused() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let mut headers = HeaderMap::new();
    headers.append(
        AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
    );
    headers.append(AUTHORIZATION, HeaderValue::from_static("Bearer other"));
    let response = app
        .http
        .get(app.url("/v1/videos"))
        .headers(headers)
        .send()
        .await
        .unwrap();
    let message = error_message(response, StatusCode::BAD_REQUEST, "bad_request").await;
    assert!(message.contains("one Authorization header"), "{message}");
}

#[tokio::test]
async fn a_wrong_method_on_a_known_path_is_405_with_allow() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let video = "00000000-0000-7000-8000-000000000000";
    for (method, path, allowed) in [
        (
            reqwest::Method::PUT,
            format!("/v1/videos/{video}"),
            "DELETE",
        ),
        (reqwest::Method::DELETE, "/v1/uploads".to_owned(), "POST"),
        (reqwest::Method::POST, "/healthz".to_owned(), "GET"),
    ] {
        let response = app
            .http
            .request(method.clone(), app.url(&path))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        let allow = response
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        assert!(allow.contains(allowed), "{method} {path}: Allow {allow:?}");
        error_message(
            response,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        )
        .await;
    }
    // An unknown path is still a 404.
    let response = app.http.put(app.url("/v1/nothing")).send().await.unwrap();
    assert_error(response, StatusCode::NOT_FOUND, "not_found").await;
}

#[tokio::test]
async fn head_healthz_answers() {
    let app = TestApp::spawn().await;
    for path in ["/healthz", "/readyz"] {
        let response = app.http.head(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "HEAD {path}");
    }
}

#[tokio::test]
async fn malformed_bodies_and_queries_get_json_errors_in_plain_words() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let post_raw = |body: &'static str, content_type: &'static str| {
        app.http
            .post(app.url("/v1/uploads"))
            .bearer_auth(&key)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let cases = [
        (
            r#"{"filename": "a.mp4", "content_type": "video/mp4", "size_bytes": "12"}"#,
            "`size_bytes` must be a whole number",
        ),
        (
            r#"{"filename": "a.mp4", "content_type": "video/mp4"}"#,
            "`size_bytes` is required",
        ),
        (r#"["a.mp4"]"#, "must be a JSON object"),
        (r#"{"filename": "a.mp4", "#, "not valid JSON"),
    ];
    for (body, expected) in cases {
        let response = post_raw(body, "application/json").await.unwrap();
        let message = error_message(response, StatusCode::BAD_REQUEST, "bad_request").await;
        assert!(message.contains(expected), "{body}: {message}");
    }
    let response = post_raw(r#"{"filename": "a.mp4"}"#, "text/plain")
        .await
        .unwrap();
    error_message(
        response,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    let response = app.get(&key, "/v1/videos?limit=lots").await;
    let message = error_message(response, StatusCode::BAD_REQUEST, "bad_request").await;
    assert!(message.contains("`limit`"), "{message}");
}

#[tokio::test]
async fn an_oversized_json_body_is_413_too_large() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let big = json!({
        "filename": "a.mp4",
        "content_type": "video/mp4",
        "size_bytes": 10,
        "padding": "x".repeat(100 * 1024),
    });
    let response = app.post(&key, "/v1/uploads", &big).await;
    error_message(response, StatusCode::PAYLOAD_TOO_LARGE, "too_large").await;
    // Without a declared length (chunked), the limit holds while reading.
    let addr = app.base.trim_start_matches("http://").to_owned();
    let stream = TcpStream::connect(&addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = format!(
        "POST /v1/webhooks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    writer.write_all(head.as_bytes()).await.unwrap();
    let write = async move {
        let chunk = format!("1000\r\n{}\r\n", " ".repeat(4096));
        for _ in 0..40 {
            // The server may answer and close before the end.
            if writer.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
        let _ = writer.write_all(b"0\r\n\r\n").await;
    };
    let (_, response) = tokio::join!(write, read_response(&mut reader));
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.contains("too_large"), "{response}");
}

#[tokio::test]
async fn a_stalled_body_is_cut_and_a_slow_steady_one_is_not() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let idle = Duration::from_secs(2);
    let (addr, _server) = serve_with(
        &app,
        HttpLimits {
            body_idle: idle,
            ..HttpLimits::default()
        },
    );
    let head = |length: usize| {
        format!(
            "POST /v1/uploads HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
             Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        )
    };

    // A byte a second: 100 bytes would take 100 s.
    let stream = TcpStream::connect(&addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    writer.write_all(head(100).as_bytes()).await.unwrap();
    let started = Instant::now();
    let dribble = async {
        loop {
            if writer.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            if started.elapsed() > Duration::from_secs(15) {
                break;
            }
        }
    };
    let (_, response) = tokio::join!(dribble, async {
        tokio::time::timeout(Duration::from_secs(15), read_response(&mut reader))
            .await
            .expect("a body sent a byte a second is still being read after 15 s")
    });
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("request_timeout"), "{response}");
    assert!(
        started.elapsed() < idle + Duration::from_secs(4),
        "cut after {:?}",
        started.elapsed()
    );

    // 4 KiB, a KiB every 1.5 s: slower than the idle limit end to end, but always moving.
    let body = json!({
        "filename": "a.mp4",
        "content_type": "video/mp4",
        "size_bytes": 10,
        "padding": "x".repeat(4000),
    })
    .to_string();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream.write_all(head(body.len()).as_bytes()).await.unwrap();
    let started = Instant::now();
    for part in body.as_bytes().chunks(1024) {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        stream.write_all(part).await.unwrap();
    }
    let response = read_response(&mut stream).await;
    assert!(
        started.elapsed() > idle,
        "the body took longer than the idle limit"
    );
    assert!(response.starts_with("HTTP/1.1 201"), "{response}");
}

#[tokio::test]
async fn one_address_beyond_its_connection_limit_gets_429() {
    let app = TestApp::spawn().await;
    let (addr, _server) = serve_with(
        &app,
        HttpLimits {
            max_connections_per_ip: 2,
            ..HttpLimits::default()
        },
    );
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let response = read_response(&mut stream).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        held.push(stream);
    }
    let mut third = TcpStream::connect(&addr).await.unwrap();
    third.write_all(request.as_bytes()).await.unwrap();
    let response = read_response(&mut third).await;
    assert!(response.starts_with("HTTP/1.1 429"), "{response}");
    assert!(response.contains("too_many_connections"), "{response}");
    // The refused connection is closed, not kept.
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut rest))
        .await
        .expect("the refused connection is still open")
        .unwrap();
    assert_eq!(n, 0);

    // Closing the held connections frees the address's slots.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let response = read_response(&mut stream).await;
        if response.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "slots never freed: {response}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn webhook_urls_with_port_zero_and_repeated_event_types_are_refused() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let response = app
        .post(
            &key,
            "/v1/webhooks",
            &json!({ "url": "http://127.0.0.1:0/hooks" }),
        )
        .await;
    let message = error_message(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_webhook_url",
    )
    .await;
    assert!(message.contains("port"), "{message}");
    let response = app
        .post(
            &key,
            "/v1/webhooks",
            &json!({
                "url": "http://127.0.0.1:9/hooks",
                "event_types": ["video.ready", "video.failed", "video.ready"],
            }),
        )
        .await;
    let message = error_message(response, StatusCode::BAD_REQUEST, "invalid_event_types").await;
    assert!(message.contains("video.ready"), "{message}");
    assert_eq!(
        app.count("SELECT count(*) AS n FROM webhook_endpoints")
            .await,
        0
    );
}

/// `vidq api` as an operator runs it, with the default log filter.
#[tokio::test]
async fn client_errors_are_not_logged_as_errors_and_probes_are_quiet() {
    let app = TestApp::spawn().await;
    let key = app.create_user("alice").await;
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("api.log");
    let mut command = crate::support::process::vidq_child("api", &log);
    command
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .env("DATABASE_URL", &app.db.url)
        .env("VIDQ_NO_MIGRATE", "true")
        .env("VIDQ_HTTP_ADDR", &addr)
        .env("VIDQ_S3_ENDPOINT", app.s3.as_ref().unwrap().endpoint())
        .env("VIDQ_S3_BUCKET", crate::support::app::TEST_BUCKET)
        .env("VIDQ_S3_FORCE_PATH_STYLE", "true")
        .env("AWS_ACCESS_KEY_ID", "test-access")
        .env("AWS_SECRET_ACCESS_KEY", "test-secret");
    let mut child = command.spawn().unwrap();
    let base = format!("http://{addr}");
    crate::support::process::answering(&app.http, &base, || {
        std::fs::read_to_string(&log).unwrap_or_default()
    })
    .await;
    for _ in 0..20 {
        let response = app
            .http
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = app
        .http
        .post(format!("{base}/v1/uploads"))
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let response = app
        .http
        .get(format!("{base}/v1/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    // Requests actix refuses before any handler: a broken request line, a huge header.
    for raw in [
        "NOT HTTP AT ALL\r\n\r\n".to_owned(),
        format!(
            "GET /healthz HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        ),
    ] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let _ = stream.write_all(raw.as_bytes()).await;
        let response = read_response(&mut stream).await;
        assert!(
            response.starts_with("HTTP/1.1 400") || response.starts_with("HTTP/1.1 431"),
            "{response}"
        );
    }
    // The access line of the 404 is written after its response: wait for it, then stop.
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("/v1/nothing") || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    child.kill().await.unwrap();
    assert!(
        text.contains("/v1/nothing") && text.contains("404"),
        "client errors are logged (at INFO): {text}"
    );
    assert!(
        !text.contains("ERROR"),
        "a client error was logged at ERROR: {text}"
    );
    assert!(
        !text.contains("/healthz"),
        "health probes were logged: {text}"
    );
}
