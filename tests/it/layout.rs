//! Where things live, checked on the source tree: SQL only in `src/db/`, every `VIDQ_*`
//! setting declared under `src/config/`, states read as enums, no file over 600 lines, no
//! import cycle between top-level modules, a short README that links every document. A
//! reader finds a statement, a setting or a behaviour in one place.

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

#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > 600)
        .map(|(name, text)| format!("{name}: {} lines", text.lines().count()))
        .collect();
    assert!(
        long.is_empty(),
        "split these by job (a module per job, `//!` saying which):\n{}",
        long.join("\n")
    );
}

/// The top-level module a source file belongs to (`src/queue/complete/mod.rs` -> `queue`),
/// `None` for the crate roots.
fn top_module(name: &str) -> Option<String> {
    let rest = name.strip_prefix("src/")?;
    let first = rest.split('/').next()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (!["lib", "main"].contains(&module)).then(|| module.to_owned())
}

/// Which top-level modules each one names as `crate::<module>` outside comments.
fn module_imports() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let sources = sources();
    let tops: std::collections::BTreeSet<String> =
        sources.iter().filter_map(|(n, _)| top_module(n)).collect();
    let mut imports = std::collections::BTreeMap::<_, std::collections::BTreeSet<_>>::new();
    for (name, text) in &sources {
        let Some(from) = top_module(name) else {
            continue;
        };
        let entry = imports.entry(from.clone()).or_default();
        let code = text.lines().filter(|l| !l.trim_start().starts_with("//"));
        for line in code {
            for (i, _) in line.match_indices("crate::") {
                let to: String = line[i + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if to != from && tops.contains(&to) {
                    entry.insert(to);
                }
            }
        }
    }
    imports
}

#[test]
fn top_level_modules_import_each_other_in_one_direction_only() {
    let imports = module_imports();
    assert!(imports.len() > 10, "found only {:?}", imports.keys());
    // Peel off modules that import nothing still left; whatever remains sits on a cycle.
    let mut left: std::collections::BTreeSet<&String> = imports.keys().collect();
    loop {
        let free: Vec<&String> = left
            .iter()
            .copied()
            .filter(|m| imports[*m].iter().all(|to| !left.contains(to)))
            .collect();
        if free.is_empty() {
            break;
        }
        for m in free {
            left.remove(m);
        }
    }
    let cycle: Vec<String> = left
        .iter()
        .map(|m| {
            let on: Vec<&String> = imports[*m].iter().filter(|to| left.contains(to)).collect();
            format!("{m} -> {on:?}")
        })
        .collect();
    assert!(
        cycle.is_empty(),
        "top-level modules import each other in a cycle (move the shared type down a \
         level; docs/architecture.md, Source map, has the order):\n{}",
        cycle.join("\n")
    );
}

#[test]
fn rows_carry_states_as_enums_never_as_strings() {
    let fields = [
        "state",
        "status",
        "kind",
        "outcome",
        "via",
        "store",
        "reject_reason",
        "end_reason",
        "error_code",
        "video_status",
    ];
    let mut found = Vec::new();
    for (name, text) in sources() {
        if !name.starts_with("src/db/") {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            let Some((field, ty)) = line.strip_prefix("pub ").and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            if fields.contains(&field.trim()) && ty.contains("String") {
                found.push(format!("{name}:{}: {line}", i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a state read as a string (read it as its domain enum; db::states maps them):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_readme_stays_short_and_links_every_document() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 500,
        "README.md has {lines} lines; move detail into docs/"
    );
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            assert!(
                readme.contains(&format!("docs/{name}")),
                "README.md does not link docs/{name}"
            );
        }
    }
}

#[test]
fn ci_runs_the_test_command_the_readme_gives_a_newcomer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let quick_start = &readme[readme.find("## Quick start").unwrap()..];
    let quick_start = &quick_start[..quick_start[3..].find("\n## ").unwrap()];
    for command in ["scripts/dev", "scripts/test"] {
        assert!(
            quick_start.contains(&format!("```sh\n{command}\n```")),
            "the Quick start gives `{command}` as a block of its own"
        );
        assert!(root.join(command).exists(), "{command}");
    }
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let last = ci.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(
        last.trim(),
        "scripts/test",
        ".ci/run ends by running the README's test command"
    );
}
