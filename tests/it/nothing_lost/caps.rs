//! Per-user caps under concurrency, on real processes: `vidq api` with a cap of 50, and 200
//! creates of each kind sent at once from one key. Exactly 50 are created (201) and the rest
//! refused (429, naming the cap); with the `s3` tus store, S3 holds exactly 50 multipart
//! uploads afterwards: a refused create opened none.

use futures_util::future::join_all;
use reqwest::StatusCode;
use serde_json::json;

use crate::support::deployment::Deployment;
use crate::support::process::free_port;
use crate::support::tus::metadata;

const CAP: usize = 50;
const SENT: usize = 200;

/// What one create request is.
#[derive(Clone, Copy, Debug)]
enum Create {
    Presigned,
    SinglePut,
    Tus,
    Live,
}

/// Sends `SENT` creates of `kind` for `key` to `api` at once; the status of each.
async fn burst(d: &Deployment, api: &str, key: &str, kind: Create) -> Vec<StatusCode> {
    let one = |_| async {
        let request = match kind {
            Create::Presigned | Create::SinglePut => {
                let mut body = json!({"filename": "clip.mp4", "content_type": "video/mp4",
                    "size_bytes": 1000});
                if matches!(kind, Create::SinglePut) {
                    body["via"] = json!("vidq");
                }
                d.http.post(format!("{api}/v1/uploads")).json(&body)
            }
            Create::Tus => d
                .http
                .post(format!("{api}/v1/tus/"))
                .header("Tus-Resumable", "1.0.0")
                .header("Upload-Length", "1000")
                .header("Upload-Metadata", metadata("clip.mp4", "video/mp4")),
            Create::Live => d.http.post(format!("{api}/v1/live")).json(&json!({})),
        };
        let response = request.bearer_auth(key).send().await.unwrap();
        let status = response.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let body: serde_json::Value = response.json().await.unwrap();
            let code = body["error"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let expected = match kind {
                Create::Live => "too_many_open_recordings",
                _ => "too_many_open_uploads",
            };
            assert_eq!(code, expected, "{body}");
        }
        status
    };
    join_all((0..SENT).map(one)).await
}

fn created(statuses: &[StatusCode]) -> usize {
    let other: Vec<_> = statuses
        .iter()
        .filter(|s| **s != StatusCode::CREATED && **s != StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert!(other.is_empty(), "only 201 or 429: {other:?}");
    statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count()
}

#[tokio::test]
async fn two_hundred_parallel_creates_of_each_kind_make_exactly_the_cap() {
    let mut d = Deployment::prepare().await;
    let s3 = d.s3.endpoint();
    let caps = [
        ("VIDQ_MAX_OPEN_UPLOADS_PER_USER", "50"),
        ("VIDQ_MAX_OPEN_RECORDINGS_PER_USER", "50"),
    ];
    d.start_with(&s3, &caps).await;
    // A second API node with the `s3` tus store, on the same database and bucket.
    let port = free_port();
    let node = "api-s3";
    let _s3_node = d
        .command_logged("api", node, &s3, node)
        .envs(caps)
        .env("VIDQ_TUS_STORE", "s3")
        .env("VIDQ_SPOOL_DIR", d.node_dir(node).join("spool"))
        .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{port}"))
        .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{}", free_port()))
        .spawn()
        .unwrap();
    let s3_api = format!("http://127.0.0.1:{port}");
    crate::support::process::answering(&d.http, &s3_api, || d.logs()).await;

    let api = d.api.clone();
    for (name, kind, at) in [
        ("presigned", Create::Presigned, &api),
        ("single-put", Create::SinglePut, &api),
        ("tus-spool", Create::Tus, &api),
        ("tus-s3", Create::Tus, &s3_api),
        ("live", Create::Live, &api),
    ] {
        let key = d.user(name).await;
        let statuses = burst(&d, at, &key, kind).await;
        assert_eq!(
            created(&statuses),
            CAP,
            "{name}: exactly the cap is created"
        );
        let table = if matches!(kind, Create::Live) {
            "recordings"
        } else {
            "uploads"
        };
        let rows = d
            .count(&format!(
                "SELECT count(*) AS n FROM {table} t JOIN users u ON u.id = t.owner_id
                  WHERE u.name = '{name}'"
            ))
            .await;
        assert_eq!(rows, CAP as i64, "{name}: as many rows as 201s");
        // A create after the burst is refused too: the count was not fooled by the burst.
        if let Create::Presigned = kind {
            let again = burst_one(&d, &api, &key).await;
            assert_eq!(
                again,
                StatusCode::TOO_MANY_REQUESTS,
                "{name}: still at the cap"
            );
        }
    }
    let open = d.storage.list_multiparts("").await.unwrap();
    assert_eq!(
        open.len(),
        CAP,
        "one S3 multipart upload per created s3-store upload, none for a refused one"
    );
}

async fn burst_one(d: &Deployment, api: &str, key: &str) -> StatusCode {
    d.http
        .post(format!("{api}/v1/uploads"))
        .bearer_auth(key)
        .json(&json!({"filename": "clip.mp4", "content_type": "video/mp4", "size_bytes": 1000}))
        .send()
        .await
        .unwrap()
        .status()
}
