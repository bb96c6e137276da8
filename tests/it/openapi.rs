//! `GET /openapi.json`: an OpenAPI 3.1 document that lists every route the server registers
//! with exactly the methods it answers, and a schemathesis run against a real `vidq dev`
//! that finds no server error and no answer the document does not describe.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::app::TestApp;
use crate::support::db::TestDb;
use crate::support::openapi::document;
use crate::support::process::{free_port, vidq_child};

/// Every path `routes::configure` registers, read from its source: the `scope("...")` and
/// `resource("...")` / `resource(["...", ...])` calls, a resource under every scope whose
/// parentheses enclose it. A route added there without documentation fails the test below.
fn registered_paths() -> Vec<String> {
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/http/routes/mod.rs"
    ))
    .unwrap();
    let code: String = source
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    let mut depth = 0usize;
    // (depth of the call that holds the scope, prefix)
    let mut scopes: Vec<(usize, String)> = Vec::new();
    let mut paths = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &code[i..];
        let word_start = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if word_start && (rest.starts_with("scope(") || rest.starts_with("resource(")) {
            let open = i + rest.find('(').unwrap();
            let close = open + code[open..].find(')').unwrap();
            let literals: Vec<String> = code[open + 1..close]
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            let prefix: String = scopes.iter().map(|(_, p)| p.as_str()).collect();
            if rest.starts_with("scope(") {
                scopes.push((depth, literals[0].clone()));
            } else {
                paths.extend(literals.iter().map(|l| format!("{prefix}{l}")));
            }
            i = close + 1;
            continue;
        }
        match bytes[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                scopes.retain(|(d, _)| *d <= depth);
            }
            b'"' => i += code[i + 1..].find('"').unwrap() + 1,
            _ => {}
        }
        i += 1;
    }
    paths
}

/// `path` with a value in each `{param}`.
fn concrete(path: &str) -> String {
    let mut out = String::new();
    for (i, part) in path.split(['{', '}']).enumerate() {
        out.push_str(if i % 2 == 1 {
            "0191e0f4-0000-7000-8000-000000000000"
        } else {
            part
        });
    }
    out
}

/// The methods the running server routes for `path`: a method no route takes (TRACE) is
/// answered 405 with `Allow`, the list actix keeps of the resource's routes.
async fn allowed_methods(app: &TestApp, path: &str) -> BTreeSet<String> {
    let response = app
        .http
        .request(Method::TRACE, app.url(&concrete(path)))
        // The tus scope answers a request without it 412 before routing.
        .header("Tus-Resumable", "1.0.0")
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::METHOD_NOT_ALLOWED,
        "{path} is not a route"
    );
    let allow = response.headers()["allow"].to_str().unwrap().to_owned();
    allow
        .split(',')
        .map(|m| m.trim().to_ascii_lowercase())
        .collect()
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Both ways of sending bytes to vidq check a checksum and answer 460 when it fails (tus's
/// `Upload-Checksum`, the single PUT's contract `checksum`); a client generated from the
/// document must know that answer on both.
#[tokio::test]
async fn both_routes_that_check_a_checksum_document_its_460() {
    let app = TestApp::spawn().await;
    let doc = document(&app).await;
    for (path, method) in [
        ("/v1/tus/{upload_id}", "patch"),
        ("/v1/uploads/{upload_id}/content", "put"),
    ] {
        let responses = &doc["paths"][path][method]["responses"];
        assert!(
            responses.get("460").is_some(),
            "{method} {path} documents 460: {responses:#}"
        );
    }
}

#[tokio::test]
async fn the_document_is_openapi_3_1_and_lists_every_route_with_the_methods_it_answers() {
    let app = TestApp::spawn().await;
    let response = app.http.get(app.url("/openapi.json")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "no API key needed");
    let doc: Value = response.json().await.unwrap();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );

    let paths = registered_paths();
    assert!(paths.len() > 20, "the route table parses: {paths:?}");
    let mut served = BTreeMap::new();
    for path in &paths {
        served.insert(path.clone(), allowed_methods(&app, path).await);
    }
    let documented: BTreeMap<String, BTreeSet<String>> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(path, item)| {
            let methods = METHODS
                .iter()
                .filter(|m| item.get(**m).is_some())
                .map(|m| (*m).to_owned())
                .collect();
            (path.clone(), methods)
        })
        .collect();
    assert_eq!(documented, served, "documented (left) vs routed (right)");

    let operations = documented.iter().flat_map(|(path, methods)| {
        let doc = &doc;
        methods
            .iter()
            .map(move |m| (path.as_str(), m.as_str(), &doc["paths"][path][m]))
    });
    let mut ids = BTreeSet::new();
    for (path, method, operation) in operations {
        let id = operation["operationId"].as_str().unwrap();
        assert!(ids.insert(id.to_owned()), "{id} twice");
        let schemes: Vec<&str> = operation["security"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s.as_object().unwrap().keys().map(String::as_str))
            .collect();
        let expected: &[&str] = if !path.starts_with("/v1/") || method == "options" {
            &[]
        } else if path.ends_with(".m3u8") {
            &["playback_token"]
        } else {
            &["api_key"]
        };
        assert_eq!(schemes, expected, "{method} {path}");
        // Every error answer with a body is the one error shape.
        for (status, answer) in operation["responses"].as_object().unwrap() {
            let status: u16 = status.parse().unwrap();
            // `/readyz` answers 503 with its own report, not an error.
            if status < 400 || method == "head" || !path.starts_with("/v1/") {
                continue;
            }
            let answer = match answer["$ref"].as_str() {
                Some(r) => &doc["components"]["responses"][r.rsplit('/').next().unwrap()],
                None => answer,
            };
            assert_eq!(
                answer["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorBody",
                "{status} of {method} {path}"
            );
        }
    }
    let codes = &doc["components"]["schemas"]["ErrorDetail"]["properties"]["code"]["enum"];
    assert!(
        codes.as_array().unwrap().contains(&json!("not_found")),
        "{codes}"
    );
    // Each code's status and meaning stand beside it, for every code the enum lists.
    let meanings = doc["components"]["schemas"]["ErrorDetail"]["properties"]["code"]["description"]
        .as_str()
        .unwrap();
    assert!(meanings.contains("- `upload_busy` (423): "), "{meanings}");
    for code in codes.as_array().unwrap() {
        let code = code.as_str().unwrap();
        assert!(
            meanings.contains(&format!("- `{code}` (")),
            "{code}: {meanings}"
        );
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["playback_token"]["in"],
        "query"
    );
}

/// `vidq dev` on its own database and free ports, stopped when dropped.
struct Dev {
    // Dropped in this order: the server first, then its files and its database.
    _child: tokio::process::Child,
    base: String,
    log: std::path::PathBuf,
    dir: tempfile::TempDir,
    db: TestDb,
}

impl Dev {
    async fn start() -> Self {
        let db = TestDb::new().await;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dev.log");
        let http = free_port();
        let mut command = vidq_child("dev", &log);
        command
            .env("DATABASE_URL", &db.url)
            .env("VIDQ_DEV_DATA_DIR", dir.path().join("data"))
            .env("VIDQ_HTTP_ADDR", format!("127.0.0.1:{http}"))
            .env("VIDQ_DEV_S3_ADDR", format!("127.0.0.1:{}", free_port()))
            .env("VIDQ_INGEST_ADDR", format!("127.0.0.1:{}", free_port()));
        let child = command.spawn().unwrap();
        let dev = Self {
            _child: child,
            base: format!("http://127.0.0.1:{http}"),
            log,
            dir,
            db,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        while !reqwest::get(format!("{}/readyz", dev.base))
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            assert!(
                Instant::now() < deadline,
                "vidq dev not ready:\n{}",
                dev.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        dev
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `vidq user create`: the key it prints.
    async fn user_key(&self, name: &str) -> String {
        let out = crate::support::cli::vidq(
            &["user", "create", "--name", name],
            &[("DATABASE_URL", &self.db.url)],
        )
        .await;
        assert!(
            out.status.success(),
            "{}",
            crate::support::cli::stderr(&out)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Uploads `bytes` as a video of `key`'s and confirms it; returns the video's id.
    async fn upload(&self, http: &reqwest::Client, key: &str, bytes: Vec<u8>) -> String {
        let created: Value = http
            .post(format!("{}/v1/uploads", self.base))
            .bearer_auth(key)
            .json(&json!({"filename": "seed.mp4", "content_type": "video/mp4",
                          "size_bytes": bytes.len()}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut put = http
            .put(created["upload_url"].as_str().unwrap())
            .body(bytes);
        for (name, value) in created["headers"].as_object().unwrap() {
            put = put.header(name, value.as_str().unwrap());
        }
        assert!(put.send().await.unwrap().status().is_success());
        let confirm = http
            .post(format!(
                "{}/v1/uploads/{}/confirm",
                self.base,
                created["upload_id"].as_str().unwrap()
            ))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(confirm.status(), StatusCode::ACCEPTED);
        confirm.json::<Value>().await.unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Waits until `video` is `ready` or `failed`.
    async fn settled(&self, http: &reqwest::Client, key: &str, video: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let status = http
                .get(format!("{}/v1/videos/{video}", self.base))
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()["status"]
                .as_str()
                .unwrap()
                .to_owned();
            if status == "ready" || status == "failed" {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{video} stays {status}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[tokio::test]
async fn schemathesis_finds_no_server_errors_or_schema_mismatches() {
    let installed = std::process::Command::new("schemathesis")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        installed,
        "schemathesis is not installed: python3 -m pip install --break-system-packages \
         -r tests/clients/requirements.txt"
    );
    let dev = Dev::start().await;
    let key = dev.user_key("schemathesis").await;
    // One event of each type, so the feed has pages to show: a long poll for a type that
    // has events answers at once instead of waiting out its `wait`.
    let http = reqwest::Client::new();
    let ready = dev
        .upload(
            &http,
            &key,
            std::fs::read(crate::support::clips::small()).unwrap(),
        )
        .await;
    let failed = dev.upload(&http, &key, b"not a video".to_vec()).await;
    assert_eq!(dev.settled(&http, &key, &ready).await, "ready");
    assert_eq!(dev.settled(&http, &key, &failed).await, "failed");

    let clients = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
    let started = Instant::now();
    let run = tokio::process::Command::new("schemathesis")
        .arg("--config-file")
        .arg(format!("{clients}/schemathesis.toml"))
        .args(["run", &format!("{}/openapi.json", dev.base)])
        .args(["-H", &format!("Authorization: Bearer {key}")])
        // Every check. 10 examples an operation keep the run well under two minutes. One
        // worker: with several, hypothesis's lambda descriptions hit a CPython 3.11 `ast`
        // bug in threads ("AST constructor recursion depth mismatch") now and then. No
        // example database: each run stands alone and writes nothing into the tree.
        .args(["--checks", "all", "--max-examples", "10", "--workers", "1"])
        .args(["--generation-database", "none", "--no-color"])
        .env(
            "SCHEMATHESIS_HOOKS",
            format!("{clients}/schemathesis_hooks.py"),
        )
        .current_dir(dev.dir.path())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("schemathesis finishes within 5 minutes")
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis failed ({:?}):\n{report}\n--- vidq dev log (end) ---\n{}",
        out.status,
        dev.log()
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The run's summary (operations, test cases, how long) for the test's output.
    let summary = report
        .lines()
        .skip_while(|line| !line.contains("SUMMARY"))
        .filter(|line| !line.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    println!("schemathesis took {:?}\n{summary}", started.elapsed());
}
