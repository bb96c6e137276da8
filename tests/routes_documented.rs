//! Every answer the API gave while the integration suite ran is in its OpenAPI document.
//!
//! The `it` binary records each (method, route, status) its in-process APIs and the `vidq`
//! processes it starts answer (debug builds only: `vidq::http::route_log`). Cargo runs this
//! binary after it, and this test fails for any pair `/openapi.json` does not list: an
//! operation that is missing, or a status its operation does not name (a documented path's
//! `405` for a method it has no operation for is the route declining, not an answer to list).
//! Run alone, with no records yet, it fails and says to run the whole suite.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Routes outside the API the document describes: the operator's dashboard (HTML, its own
/// session), the upload page and its scripts (HTML and JavaScript calling the API), the
/// document itself, and paths that match no route at all.
fn outside_the_document(route: &str) -> bool {
    route == "unmatched"
        || route.starts_with("/admin")
        || route == "/"
        || route.starts_with("/ui/")
        || route == "/openapi.json"
}

/// The newest run's records, if any run left some.
fn newest_run() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("routes-seen");
    std::fs::read_dir(root)
        .ok()?
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, path)| path)
}

#[test]
fn every_answer_the_suite_saw_is_in_the_openapi_document() {
    let run = newest_run().expect(
        "no answers recorded by the `it` binary: run the whole suite with `cargo test`, which \
         runs `it` first (a debug build records every answer its APIs give)",
    );
    let mut seen = BTreeSet::new();
    for file in std::fs::read_dir(&run).unwrap().flatten() {
        for line in std::fs::read_to_string(file.path()).unwrap().lines() {
            let mut parts = line.split(' ');
            if let (Some(method), Some(route), Some(status)) =
                (parts.next(), parts.next(), parts.next())
            {
                seen.insert((route.to_owned(), method.to_owned(), status.to_owned()));
            }
        }
    }
    assert!(!seen.is_empty(), "{} holds no records", run.display());
    let doc = vidq::http::openapi::document(5 << 30);
    let mut missing = Vec::new();
    let mut checked = 0;
    for (route, method, status) in &seen {
        if outside_the_document(route) {
            continue;
        }
        checked += 1;
        let path = match route.trim_end_matches('/') {
            "" => "/",
            trimmed => trimmed,
        };
        let operation = &doc["paths"][path][method.to_lowercase()];
        // A method the route does not take is answered 405: that is no operation to list.
        if operation.is_null() && status == "405" && !doc["paths"][path].is_null() {
            continue;
        }
        if operation.is_null() {
            missing.push(format!(
                "{method} {route} answered {status}: no such operation"
            ));
            continue;
        }
        let responses = &operation["responses"];
        if responses.get(status).is_none() && responses.get("default").is_none() {
            missing.push(format!(
                "{method} {route} answered {status}: not among its responses ({})",
                responses
                    .as_object()
                    .map(|r| r.keys().cloned().collect::<Vec<_>>().join(", "))
                    .unwrap_or_default()
            ));
        }
    }
    eprintln!(
        "{checked} recorded (route, method, status) answers checked against /openapi.json ({} recorded in all)",
        seen.len()
    );
    assert!(
        missing.is_empty(),
        "answers the document does not list:\n{}",
        missing.join("\n")
    );
}
