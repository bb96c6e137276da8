//! Where things live, checked on the source tree: SQL only in `src/db/`, every `VIDQ_*`
//! setting declared under `src/config/`, states read as enums, typed ids (never a raw
//! `Uuid`) in the db module's signatures, one policy for poisoned locks, no function over 80
//! lines outside the benchmarks, no file over 600 lines, no import cycle between top-level
//! modules, a short README that links every document. A reader finds a statement, a setting
//! or a behaviour in one place.

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
fn every_lock_is_taken_under_the_one_poisoning_policy() {
    let found: Vec<String> = sources()
        .into_iter()
        .filter(|(name, _)| name != "src/sync.rs")
        .filter(|(_, text)| {
            // Lines joined without their indentation, so a chain split over lines is seen.
            let flat: String = text.lines().map(str::trim).collect();
            [".lock().expect(", ".lock().unwrap(", "PoisonError"]
                .iter()
                .any(|needle| flat.contains(needle))
        })
        .map(|(name, _)| name)
        .collect();
    assert!(
        found.is_empty(),
        "take std::sync locks through crate::sync (docs/architecture.md, How it is built):\n{}",
        found.join("\n")
    );
}

/// Each `pub` function of `src/db` (any visibility but private) whose signature names a raw
/// `Uuid`, as `file:line: fn name`.
fn db_signatures_with_raw_uuids() -> Vec<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (name, text) in sources() {
        if !name.starts_with("src/db/") {
            continue;
        }
        for (at, _) in text.match_indices("fn ") {
            let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let head = text[line_start..at].trim();
            if !head.starts_with("pub") || head.contains("//") {
                continue;
            }
            // The signature runs to the body's `{` (or a `;`): no signature holds either.
            let end = text[at..].find(['{', ';']).map_or(text.len(), |i| at + i);
            let signature = &text[at..end];
            let raw = signature.match_indices("Uuid").any(|(i, _)| {
                let before = signature[..i].chars().next_back();
                let after = signature[i + 4..].chars().next();
                !before.is_some_and(is_word) && !after.is_some_and(is_word)
            });
            if raw {
                let line = text[..at].lines().count();
                let fn_name: String = signature[3..].chars().take_while(|&c| is_word(c)).collect();
                found.push(format!("{name}:{line}: fn {fn_name}"));
            }
        }
    }
    found
}

#[test]
fn the_db_module_takes_and_returns_typed_ids_never_a_raw_uuid() {
    let found = db_signatures_with_raw_uuids();
    assert!(
        found.is_empty(),
        "take the id's own type (VideoId, UploadId, ... in domain::ids; src/db/ids.rs binds \
         them as uuid columns):\n{}",
        found.join("\n")
    );
}

/// `text` with comments, string literals and char literals blanked (newlines kept), so that
/// the braces left are the code's own.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut i = 0;
    // A literal or comment as blanks, its newlines kept.
    let blank = |out: &mut String, part: &[char]| {
        out.extend(part.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }));
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let word_before = i > 0 && is_word(chars[i - 1]);
        let end = if c == '/' && next == Some('/') {
            (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len())
        } else if c == '/' && next == Some('*') {
            (i + 2..chars.len())
                .find(|&j| chars[j] == '*' && chars.get(j + 1) == Some(&'/'))
                .map_or(chars.len(), |j| j + 2)
        } else if !word_before && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[start..].iter().take_while(|&&h| h == '#').count();
            chars.get(start + hashes) == Some(&'"')
        } {
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[start..].iter().take_while(|&&h| h == '#').count();
            let body = start + hashes + 1;
            (body..chars.len())
                .find(|&j| {
                    chars[j] == '"'
                        && chars[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&h| h == '#')
                            .count()
                            == hashes
                })
                .map_or(chars.len(), |j| j + 1 + hashes)
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if c == '\'' && next == Some('\\') {
            (i + 2..chars.len())
                .find(|&j| chars[j] == '\'')
                .map_or(chars.len(), |j| j + 1)
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i + 3
        } else {
            out.push(c);
            i += 1;
            continue;
        };
        let end = end.min(chars.len());
        blank(&mut out, &chars[i..end]);
        i = end;
    }
    out
}

/// Every function with a body in `text`: its name, first line and length in lines.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    let bytes = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = code[at..].find(['{', ';']).map(|i| at + i) else {
            continue;
        };
        if bytes[open] == b';' {
            continue; // a declaration without a body
        }
        let mut depth = 0usize;
        for (i, b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        found.push((name.clone(), line_of(at), line_of(i) - line_of(at) + 1));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    found
}

#[test]
fn the_function_scanner_sees_braces_in_strings_and_chars_as_text() {
    let text = "fn a() {\n    let s = \"{{\";\n    let c = '{';\n    // }\n    let r = r#\"}\"#;\n}\nfn b<'x>(v: &'x str) -> &'x str {\n    v\n}\n";
    assert_eq!(
        functions(text),
        vec![("a".to_owned(), 1, 6), ("b".to_owned(), 7, 3)]
    );
}

#[test]
fn no_function_outside_the_benchmarks_is_over_80_lines() {
    let mut long: Vec<(usize, String)> = sources()
        .into_iter()
        .filter(|(name, _)| !name.starts_with("src/bench/"))
        .flat_map(|(name, text)| {
            functions(&text)
                .into_iter()
                .filter(|(_, _, lines)| *lines > 80)
                .map(move |(f, line, lines)| {
                    (lines, format!("{name}:{line}: fn {f}: {lines} lines"))
                })
        })
        .collect();
    long.sort_by(|a, b| b.cmp(a));
    let long: Vec<String> = long.into_iter().map(|(_, line)| line).collect();
    assert!(
        long.is_empty(),
        "split these into functions that each do one step (the longest first):\n{}",
        long.join("\n")
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
