//! Proves that the core keeps its shape (docs/decisions/0040-one-way-floors.md): every import between the
//! modules of `src/` points down a floor — the vocabulary (`types`, `state`, `error`) is the one floor whose
//! modules name each other — and no production function is longer than [`FUNCTION_LINES_MAX`].
//!
//! Read from the source text: a `crate::module::…` path on a line that is not a comment, in a file outside
//! `testkit/`, before its `#[cfg(test)]` module; a root re-export (`crate::Store`) counts as the module `lib.rs`
//! re-exports it from. `super::` paths stay inside a module and are not arrows between floors.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The floors, lowest first. A module's floor is that of its longest entry here (`gc::ledger` before `gc`).
const FLOORS: &[(&str, u32)] = &[
    ("limits", 0),
    ("byte_serde", 0),
    ("types", 1),
    ("state", 1),
    ("error", 1),
    ("codec", 2),
    ("create_once", 2),
    ("clock", 2),
    ("wal", 3),
    ("mirror", 4),
    ("gc::ledger", 4),
    ("store", 5),
    ("commit", 6),
    ("gc::files", 6),
    ("dir_table", 7),
    ("shared", 7),
    ("inspect", 7),
    ("multi", 7),
    ("gc", 8),
];

/// The floor whose modules may import each other (decision 0040, "Options for the vocabulary").
const VOCABULARY_FLOOR: u32 = 1;

/// The longest a production function may be, in lines from its signature to its closing brace.
const FUNCTION_LINES_MAX: usize = 80;

fn src() -> PathBuf {
    crate::common::checkout().join("src")
}

/// Every production source file: `(module path, text before its test module)`, skipping the testkit, the crate
/// root and the unit-test files.
fn production_files() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    walk(&src(), &mut paths);
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let rel = path.strip_prefix(src()).unwrap().with_extension("");
        let mut segments: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if segments.last().is_some_and(|s| s == "mod") {
            segments.pop();
        }
        let skipped = segments.first().is_some_and(|s| s == "testkit" || s == "lib")
            || segments.last().is_some_and(|s| s == "tests");
        if skipped {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        out.push((segments.join("::"), production_part(&text).to_owned()));
    }
    out
}

/// The text before a file's `#[cfg(test)]` module.
fn production_part(text: &str) -> &str {
    text.find("\n#[cfg(test)]\nmod ").map_or(text, |at| &text[..at])
}

/// The floor entry a module path falls under, by its longest prefix in [`FLOORS`].
fn floor_of(module: &str) -> Option<(&'static str, u32)> {
    FLOORS
        .iter()
        .filter(|(name, _)| module == *name || module.starts_with(&format!("{name}::")))
        .max_by_key(|(name, _)| name.len())
        .copied()
}

/// What each root re-export of `lib.rs` (`pub use store::{Store, …};`) names: item → its module path.
fn root_reexports() -> HashMap<String, String> {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut out = HashMap::new();
    for statement in lib.split(';') {
        let Some(at) = statement.find("pub use ") else { continue };
        let path = statement[at + "pub use ".len()..].trim();
        let (module, items) = match path.find("::{") {
            Some(brace) => (&path[..brace], path[brace + 3..].trim_end_matches('}')),
            None => path.rsplit_once("::").unwrap_or((path, "")),
        };
        for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            out.insert(item.to_owned(), module.to_owned());
        }
    }
    out
}

/// The `crate::…` paths of one line of code, each as its segments.
fn crate_paths(line: &str) -> Vec<Vec<&str>> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let tail = &rest[at + "crate::".len()..];
        let end = tail.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(tail.len());
        out.push(tail[..end].split("::").filter(|s| !s.is_empty()).collect());
        rest = &tail[end..];
    }
    out
}

/// Every arrow in `text` (a file of module `module`) that climbs a floor, or crosses within one floor other than
/// the vocabulary, described for the failure message.
fn climbing_arrows(module: &str, text: &str, reexports: &HashMap<String, String>) -> Vec<String> {
    let Some((from_name, from)) = floor_of(module) else {
        return vec![format!("module {module} has no floor: give it one in FLOORS")];
    };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for path in crate_paths(line) {
            let Some(first) = path.first() else { continue };
            let target = match reexports.get(*first) {
                Some(module) => module.replace("self::", ""),
                None => path
                    .iter()
                    .take_while(|s| s.starts_with(|c: char| c.is_lowercase()))
                    .copied()
                    .collect::<Vec<_>>()
                    .join("::"),
            };
            let Some((to_name, to)) = floor_of(&target) else { continue };
            let same_module = to_name == from_name;
            let allowed = same_module || to < from || (to == from && from == VOCABULARY_FLOOR);
            if !allowed {
                out.push(format!("{module} (floor {from}) → {target} (floor {to}), line {}: {}", n + 1, line.trim()));
            }
        }
    }
    out
}

/// The production functions of `text` longer than [`FUNCTION_LINES_MAX`]: `(name, lines)`. A function runs from
/// its `fn` line to the first closing brace at the same indentation.
fn long_functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let code = line.trim_start();
        let indent = line.len() - code.len();
        let signature = ["pub(crate) ", "pub(super) ", "pub ", "async ", "const "]
            .iter()
            .fold(code, |c, prefix| c.strip_prefix(prefix).unwrap_or(c));
        if let Some(name) = signature.strip_prefix("fn ").filter(|_| !line.trim_end().ends_with(';')) {
            let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let close = " ".repeat(indent) + "}";
            let end = if code.trim_end().ends_with('}') {
                i
            } else {
                (i + 1..lines.len()).find(|&j| lines[j].starts_with(&close)).unwrap_or(i)
            };
            let length = end - i + 1;
            if length > FUNCTION_LINES_MAX {
                out.push((name, length));
            }
            i = end;
        }
        i += 1;
    }
    out
}

#[test]
fn every_import_points_down_a_floor() {
    let reexports = root_reexports();
    let arrows: Vec<String> =
        production_files().iter().flat_map(|(module, text)| climbing_arrows(module, text, &reexports)).collect();
    assert!(arrows.is_empty(), "imports that climb a floor (see FLOORS in this file):\n{}", arrows.join("\n"));
}

#[test]
fn no_production_function_is_longer_than_the_limit() {
    let long: Vec<String> = production_files()
        .iter()
        .flat_map(|(module, text)| {
            long_functions(text).into_iter().map(move |(name, lines)| format!("{module}::{name}: {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over {FUNCTION_LINES_MAX} lines; split them along their seams:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checks_find_a_climbing_arrow_and_a_long_function() {
    let reexports = root_reexports();
    // The mirror naming the store (directly, or through its root re-export) climbs; the store naming the mirror
    // does not; the vocabulary names itself.
    assert_eq!(climbing_arrows("mirror::open", "use crate::store::Store;", &reexports).len(), 1);
    assert_eq!(climbing_arrows("mirror::open", "let s: &crate::Store = todo!();", &reexports).len(), 1);
    assert!(climbing_arrows("store::open", "use crate::mirror::MirrorConfig;", &reexports).is_empty());
    assert!(climbing_arrows("types", "use crate::error::Error;", &reexports).is_empty());
    assert_eq!(climbing_arrows("shared::inbox", "use crate::inspect::Inspector;", &reexports).len(), 1);
    assert!(climbing_arrows("wal::apply", "// crate::store::Store in a comment", &reexports).is_empty());
    let body = "    let x = 1;\n".repeat(FUNCTION_LINES_MAX);
    let long = format!("pub(crate) async fn long() {{\n{body}}}\n\nfn short() {{\n}}\n");
    assert_eq!(long_functions(&long), vec![("long".to_owned(), FUNCTION_LINES_MAX + 2)]);
}
