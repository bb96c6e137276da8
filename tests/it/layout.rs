//! Where things live, checked on the source tree: SQL only in `src/db/`, every `VIDQ_*`
//! setting declared under `src/config/`. A reader finds a statement or a setting in one place.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/`, with its path relative to the crate root.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            (name, text)
        })
        .collect()
}

/// `file:line: text` for every line outside `allowed` that contains one of `needles`.
fn offending(allowed: impl Fn(&str) -> bool, needles: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (name, text) in sources() {
        if allowed(&name) {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if needles.iter().any(|n| line.contains(n)) {
                found.push(format!("{name}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn sql_is_written_only_in_the_db_module() {
    let found = offending(
        |name| name.starts_with("src/db/"),
        &[
            "sql_query",
            "RunQueryDsl",
            "QueryDsl",
            "QueryableByName",
            "sql_types",
            "db::schema",
        ],
    );
    assert!(
        found.is_empty(),
        "SQL outside src/db/ (move it into a named function there):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_vidq_setting_is_declared_in_config() {
    let found = offending(|name| name.starts_with("src/config/"), &["env = \"VIDQ_"]);
    assert!(
        found.is_empty(),
        "VIDQ_* settings declared outside src/config/:\n{}",
        found.join("\n")
    );
}

#[test]
fn state_names_are_spelled_only_by_their_enums_and_the_db_module() {
    // Job, upload, artifact and delivery states; the domain enums spell them once
    // (`as_str`), `src/db/` writes them into SQL, everything else uses the enums.
    let states = [
        "\"PENDING\"",
        "\"PROCESSING\"",
        "\"COMPLETED\"",
        "\"DEAD\"",
        "\"receiving\"",
        "\"pending\"",
        "\"uploaded\"",
        "\"confirmed\"",
        "\"rejected\"",
        "\"expired\"",
        "\"sending\"",
        "\"delivered\"",
        "\"exhausted\"",
        "\"discarded\"",
    ];
    let found: Vec<String> = offending(
        |name| name.starts_with("src/db/") || name.starts_with("src/domain/"),
        &states,
    )
    .into_iter()
    // A log message may say "delivered"; it names no state.
    .filter(|line| !line.contains("tracing::"))
    .collect();
    assert!(
        found.is_empty(),
        "state spelled as a string outside src/db/ and the domain enums:\n{}",
        found.join("\n")
    );
}
