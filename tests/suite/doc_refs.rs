//! Proves that the docs cite only what exists: every repository path they name is a file or directory, and every
//! test or function they name is defined somewhere in the workspace.
//!
//! Scanned: `README.md` and every `docs/**/*.md` but the lab notebook `docs/bench-log/` (history, never edited to
//! stay current). What counts as a citation:
//! - **paths**: a word of an inline code span, or a markdown link target, that starts with one of [`ROOTS`]
//!   (`src/wal/writer.rs`, `tests/suite/seal_window.rs::mirrored::…`, `crates/sinkpoint-cli/tests/cli.rs:40`); a
//!   relative link target (`protocols/commit.md#anchor`), resolved from the document's directory; in a fenced
//!   block, the first word of a line (the code map) and the script after `python`, `bash` or `source`;
//! - **items**: an inline code span that is a Rust path whose last segment is a snake_case name — with a
//!   lowercase qualifier (`wal::fresh::tests::a_part_whose_record_leaves_the_window_is_settled_first`,
//!   `mirror_async::a_mark_lost_with_the_disk_is_found_again_in_the_table`, `error::open_failed`) or, bare, of five
//!   words or more (`a_fresh_store_for_a_job_already_in_the_target_is_refused`). It must be a `fn`, a `mod`, a
//!   module file or a Python `def`; with a file (`tests/suite/x.rs::name`), in that file. A name ending in `*` or
//!   `…` is a prefix. Type-qualified names (`Store::flush`) are not checked.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The first segments of the repository paths the docs cite.
const ROOTS: &[&str] = &["src/", "tests/", "crates/", "benches/", "examples/", "fuzz/", "docs/", ".ci/"];
/// Where items are defined.
const CODE_DIRS: &[&str] = &["src", "tests", "crates", "benches", "examples", "fuzz"];
/// Names the docs quote from other projects (a Daft setting), which look like long snake_case items.
const NOT_ITEMS: &[&str] = &["enable_scan_task_split_and_merge"];

fn root() -> PathBuf {
    crate::common::checkout()
}

/// Every file under `dir` whose name ends with one of `exts`, skipping build output, virtual environments and
/// hidden directories.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let skipped =
                name.starts_with('.') || matches!(name.as_str(), "target" | "venv" | "__pycache__" | "corpus");
            if !skipped {
                files(&path, exts, out);
            }
        } else if exts.iter().any(|ext| name.ends_with(ext)) {
            out.push(path);
        }
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The names `text` defines after each of `keywords` (`fn`, `mod`, `def`).
fn defined_names(text: &str, keywords: &[&str], names: &mut HashSet<String>) {
    for keyword in keywords {
        let mut rest = text;
        while let Some(at) = rest.find(keyword) {
            let before = rest[..at].chars().next_back();
            let after = &rest[at + keyword.len()..];
            if before.is_none_or(|c| !is_ident_char(c)) {
                let name: String = after.chars().take_while(|&c| is_ident_char(c)).collect();
                if !name.is_empty() {
                    names.insert(name);
                }
            }
            rest = after;
        }
    }
}

/// Every name defined in the workspace's code: functions, modules, module files and Python functions.
fn workspace_names() -> HashSet<String> {
    let mut paths = Vec::new();
    for dir in CODE_DIRS {
        files(&root().join(dir), &[".rs", ".py"], &mut paths);
    }
    let mut names = HashSet::new();
    for path in paths {
        let text = fs::read_to_string(&path).unwrap_or_default();
        if path.extension().is_some_and(|e| e == "py") {
            defined_names(&text, &["def "], &mut names);
        } else {
            defined_names(&text, &["fn ", "mod "], &mut names);
            if let Some(stem) = path.file_stem() {
                names.insert(stem.to_string_lossy().into_owned());
            }
        }
    }
    names
}

/// A citation found in a document, with its line number.
struct Cited {
    line: usize,
    text: String,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// An inline code span: its words may be paths, and the whole span may be an item.
    Code,
    /// A word of a fenced block or a repository path: checked as a path only.
    Path,
    /// A markdown link target, relative to the document.
    Link,
}

fn citations(doc: &str) -> Vec<Cited> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (index, line) in doc.lines().enumerate() {
        let number = index + 1;
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            // A line that starts with a space continues the one before it (the code map's descriptions).
            let mut words = line.split_whitespace();
            if !line.starts_with(char::is_whitespace)
                && let Some(first) = words.next()
            {
                out.push(Cited { line: number, text: first.to_owned(), kind: Kind::Path });
                if matches!(first, "python" | "bash" | "source")
                    && let Some(second) = words.next()
                {
                    out.push(Cited { line: number, text: second.to_owned(), kind: Kind::Path });
                }
            }
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 1 {
                out.push(Cited { line: number, text: span.to_owned(), kind: Kind::Code });
            }
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let target = &rest[at + 2..];
            let end = target.find(')').unwrap_or(target.len());
            out.push(Cited { line: number, text: target[..end].to_owned(), kind: Kind::Link });
            rest = &target[end..];
        }
    }
    out
}

/// The repository path a word names, if it names one: `tests/x.rs::name` and `src/x.rs:40` give their file.
fn repository_path(word: &str) -> Option<&str> {
    let word = word.trim_end_matches([',', ';', '.', ')', ':']);
    let word = word.split("::").next()?;
    let word = word.split(':').next()?;
    let plain = word.chars().all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c));
    (plain && ROOTS.iter().any(|r| word.starts_with(r) && word.len() > r.len())).then_some(word)
}

fn is_snake(segment: &str) -> bool {
    segment.starts_with(|c: char| c.is_ascii_lowercase())
        && segment.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The item an inline code span cites, as (file it must be in, name, whether the name is a prefix).
fn cited_item(span: &str) -> Option<(Option<&str>, String, bool)> {
    let (file, path) = match span.split_once(".rs::") {
        Some((file, rest)) if repository_path(file).is_some() => (Some(file), rest),
        _ => (None, span),
    };
    let segments: Vec<&str> = path.split("::").collect();
    let (last, qualifiers) = segments.split_last()?;
    let prefix = last.ends_with('*') || last.ends_with('…');
    let name = last.trim_end_matches(['*', '…']);
    if !is_snake(name) || !qualifiers.iter().all(|q| is_snake(q)) || NOT_ITEMS.contains(&name) {
        return None;
    }
    let words = name.split('_').filter(|w| !w.is_empty()).count();
    let checked = if file.is_some() || !qualifiers.is_empty() {
        words >= 2
    } else if prefix {
        words >= 3
    } else {
        words >= 5
    };
    checked.then(|| (file.map(|f| &span[..f.len() + 3]), name.to_owned(), prefix))
}

/// The first segment of a Rust path: a qualified name is checked only when it starts in this workspace (a module
/// or a module file), not in a dependency (`futures::future::join_all`).
fn first_segment(path: &str) -> &str {
    path.split("::").next().unwrap_or_default()
}

/// Every stale citation in the scanned documents, one line each.
fn stale_citations() -> Vec<String> {
    let root = root();
    let names = workspace_names();
    let mut docs = vec![root.join("README.md")];
    files(&root.join("docs"), &[".md"], &mut docs);
    docs.retain(|d| !d.starts_with(root.join("docs/bench-log")));
    let mut stale = Vec::new();
    for doc in docs {
        let text = fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        let shown = doc.strip_prefix(&root).unwrap_or(&doc).display().to_string();
        let dir = doc.parent().unwrap_or(&root).to_path_buf();
        for cited in citations(&text) {
            let at = format!("{shown}:{}: `{}`", cited.line, cited.text);
            match cited.kind {
                Kind::Link => {
                    let target = cited.text.split('#').next().unwrap_or_default();
                    let external = cited.text.contains("://") || cited.text.starts_with("mailto:");
                    if !external && !target.is_empty() && !dir.join(target).exists() {
                        stale.push(format!("{at}: the link's target does not exist"));
                    }
                }
                Kind::Path | Kind::Code => {
                    let words: Vec<&str> = if cited.kind == Kind::Path {
                        vec![cited.text.as_str()]
                    } else {
                        cited.text.split_whitespace().collect()
                    };
                    for word in words {
                        if let Some(path) = repository_path(word)
                            && !root.join(path).exists()
                        {
                            stale.push(format!("{at}: no file or directory {path}"));
                        }
                    }
                    if cited.kind == Kind::Code
                        && let Some((file, name, prefix)) = cited_item(&cited.text)
                        && (file.is_some() || !cited.text.contains("::") || names.contains(first_segment(&cited.text)))
                    {
                        let found = match file {
                            Some(file) => {
                                let mut in_file = HashSet::new();
                                let code = fs::read_to_string(root.join(file)).unwrap_or_default();
                                defined_names(&code, &["fn ", "mod "], &mut in_file);
                                in_file.iter().any(|n| if prefix { n.starts_with(&name) } else { *n == name })
                            }
                            None if prefix => names.iter().any(|n| n.starts_with(&name)),
                            None => names.contains(&name),
                        };
                        if !found {
                            let place = file.map_or("the workspace".to_owned(), str::to_owned);
                            stale.push(format!("{at}: no fn, mod or def `{name}` in {place}"));
                        }
                    }
                }
            }
        }
    }
    stale
}

#[test]
fn every_path_test_and_function_the_docs_cite_exists() {
    let stale = stale_citations();
    assert!(stale.is_empty(), "{} stale citations in the docs:\n{}", stale.len(), stale.join("\n"));
}

#[test]
fn the_scanner_sees_paths_items_and_links() {
    let doc = "see `src/wal/writer.rs::group_kind` and [x](protocols/commit.md#a)\n```\nsrc/lib.rs  docs\n```\n";
    let cited = citations(doc);
    assert_eq!(cited.len(), 3);
    assert!(matches!(cited[1].kind, Kind::Link));
    assert_eq!(repository_path("tests/suite/seal_window.rs::mirrored::x"), Some("tests/suite/seal_window.rs"));
    assert_eq!(repository_path("src/commit/target.rs:63-97"), Some("src/commit/target.rs"));
    assert_eq!(repository_path("cargo"), None);
    let item = cited_item("tests/suite/seal_window.rs::mirrored::a_flush_does_not_wait_for_the_linger");
    assert!(
        matches!(item, Some((Some("tests/suite/seal_window.rs"), ref n, false)) if n == "a_flush_does_not_wait_for_the_linger")
    );
    assert!(matches!(cited_item("the_operators_collection_*"), Some((None, _, true))));
    assert!(cited_item("Store::sealed_page_off_runtime").is_none());
    assert!(cited_item("check_processed_in_worker").is_none());
    assert!(matches!(cited_item("error::open_failed"), Some((None, ref n, false)) if n == "open_failed"));
}
