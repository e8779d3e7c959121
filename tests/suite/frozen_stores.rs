//! Proves that this version opens, verifies, restores, recovers and finishes the stores older versions wrote, as
//! they wrote them: `tests/fixtures/format-N/` is a job left half done by the code of store format N (a redb file,
//! its mirror and its `DirTable`, committed bytes; `tests/fixtures/README.md` names the commit and holds the
//! program that wrote it). Each fixture holds one checkpoint in each state: a and b Committed under key 0, d
//! Committing under key 1 whose commit landed in the table without its mark (F1), c Sealed, e Staged (one part of
//! two, an orphan at the next open; in format 2 a fresh part, kept in its stage record), f Aborted with its
//! result in the garbage ledger. Each test works on a copy: read-only from the file and from the mirror, then a
//! writer's open from the file and one restored from the mirror alone, each recovered and finished with every
//! row in the table once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use object_store::local::LocalFileSystem;
use sinkpoint::Committer;
use sinkpoint::inspect::Inspector;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::{Attempt, CheckpointId, CheckpointState, DirTable, JobId, Part, StagePart, Store, TargetIdentity};

/// The store formats with a fixture: every format this version opens (`STORE_FORMAT_VERSION_OLDEST` to
/// `STORE_FORMAT_VERSION`).
const FORMATS: [u32; 2] = [1, 2];
const MIRROR_PREFIX: &str = "fixture";

/// Each checkpoint of a fixture and its state as written.
fn as_written() -> Vec<(&'static str, CheckpointState)> {
    vec![
        ("a", CheckpointState::Committed { key: Some(0) }),
        ("b", CheckpointState::Committed { key: Some(0) }),
        ("c", CheckpointState::Sealed),
        ("d", CheckpointState::Committing { key: 1 }),
        ("e", CheckpointState::Staged),
        ("f", CheckpointState::Aborted),
    ]
}

/// Each input's parts: what the table holds once, when the job is done (f was aborted).
const PARTS: [(&str, u32); 5] = [("a", 1), ("b", 2), ("c", 1), ("d", 1), ("e", 2)];

fn id(s: &str) -> CheckpointId {
    CheckpointId::new(s).unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A copy of fixture `format` in a temporary directory (tests write to it; the committed bytes stay as they are).
fn copy(format: u32) -> (tempfile::TempDir, PathBuf) {
    let fixture = crate::common::checkout().join(format!("tests/fixtures/format-{format}"));
    assert!(fixture.join("store.redb").exists(), "no fixture at {}", fixture.display());
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join(format!("format-{format}"));
    copy_dir(&fixture, &copy);
    (dir, copy)
}

fn mirror(dir: &Path) -> Arc<LocalFileSystem> {
    Arc::new(LocalFileSystem::new_with_prefix(dir.join("mirror")).unwrap())
}

async fn open(dir: &Path, file: &str) -> Store {
    Store::builder(JobId::new("fixture").unwrap(), TargetIdentity::new("file:///fixture-table").unwrap())
        .path(dir.join(file))
        .mirror(mirror(dir), object_store::path::Path::from(MIRROR_PREFIX), MirrorSettings::default())
        .open()
        .await
        .unwrap()
}

fn check_inspected(inspector: &Inspector, format: u32) {
    for (name, state) in as_written() {
        let info = inspector.get(&id(name)).unwrap().unwrap_or_else(|| panic!("format {format}: {name} missing"));
        assert_eq!(info.state, state, "format {format}: {name}");
    }
    let summary = inspector.summary().unwrap();
    assert_eq!(summary.in_flight.map(|c| c.key), Some(1), "format {format}");
    assert_eq!(summary.next_key, 2, "format {format}");
    assert_eq!(summary.garbage_entries, 1, "format {format}: f's result");
    assert!(!summary.finished, "format {format}");
    let processed: Vec<Vec<u8>> = inspector.processed_keys().map(|k| k.unwrap()).collect();
    let sealed = ["a/0", "b/0", "b/1", "c/0", "d/0"].map(|k| format!("s3://in/{k}").into_bytes());
    assert_eq!(processed, sealed, "format {format}: the sealed checkpoints' keys, not e's or f's");
}

/// The job's end, as its rerun does it: recovery finds key 1 landed (F1) and commits c; the orphan e is
/// restarted and staged whole; the final commit takes it. Then the table holds every row once.
async fn recover_and_finish(store: &Store, table: &DirTable, format: u32) {
    for (name, state) in as_written() {
        assert_eq!(store.get(&id(name)).unwrap().unwrap().state, state, "format {format}: {name}");
    }
    assert_eq!(store.orphans(), [id("e")], "format {format}");
    assert!(store.verify_log().unwrap() > 0, "format {format}");
    let committer = Committer::new(store, table);
    let report = committer.recover().await.unwrap();
    assert_eq!(report.marked_landed, Some(1), "format {format}: d's commit landed before the fixture's crash");
    assert_eq!(report.committed_keys, [2], "format {format}: c");
    assert_eq!(report.orphans, [id("e")], "format {format}");
    assert_eq!(store.get(&id("d")).unwrap().unwrap().state, CheckpointState::Committed { key: Some(1) });

    let e = id("e");
    let attempt = store.get(&e).unwrap().unwrap().attempt;
    store.restart(&e).await.unwrap();
    let attempt = attempt.next();
    assert_ne!(attempt, Attempt::FIRST);
    for part in 0..2 {
        let rows = format!("e:{part}:0\ne:{part}:1\n").into_bytes();
        let result = table.write_data_file(&format!("e-{part}-retried.rows"), rows).await.unwrap();
        let key = format!("s3://in/e/{part}").into_bytes();
        store.stage(&e, StagePart::new(attempt, Part::new(part)).keys(vec![key]).results(vec![result])).await.unwrap();
    }
    store.seal(&e, 2).await.unwrap();
    let report = committer.finish().await.unwrap();
    assert_eq!(report.committed_keys, [3], "format {format}: e, with the job's end");
    assert_eq!(store.get(&e).unwrap().unwrap().state, CheckpointState::Committed { key: Some(3) });
    assert_eq!(store.get(&id("f")).unwrap().unwrap().state, CheckpointState::Aborted);

    let mut rows = table.rows().await.unwrap();
    rows.sort();
    let mut expected: Vec<String> = PARTS
        .iter()
        .flat_map(|&(name, parts)| (0..parts).flat_map(move |p| (0..2).map(move |r| format!("{name}:{p}:{r}"))))
        .collect();
    expected.sort();
    assert_eq!(rows, expected, "format {format}: every row once, f's never");
}

#[test]
fn every_format_this_version_opens_has_a_fixture() {
    let fixtures = crate::common::checkout().join("tests/fixtures");
    let mut found: Vec<String> = std::fs::read_dir(&fixtures)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("format-"))
        .collect();
    found.sort();
    assert_eq!(found, FORMATS.map(|f| format!("format-{f}")));
}

#[tokio::test]
async fn each_fixture_reads_as_written_from_its_file_and_from_its_mirror() {
    for format in FORMATS {
        let (_dir, copy) = copy(format);
        let inspector = Inspector::open_file(copy.join("store.redb")).unwrap();
        let report = inspector.verify().unwrap();
        assert_eq!(report.checkpoints, 6, "format {format}");
        check_inspected(&inspector, format);
        let inspector =
            Inspector::open_mirror(mirror(&copy), object_store::path::Path::from(MIRROR_PREFIX)).await.unwrap();
        check_inspected(&inspector, format);
    }
}

#[tokio::test]
async fn each_fixture_opened_from_its_file_recovers_and_finishes_every_row_once() {
    for format in FORMATS {
        let (_dir, copy) = copy(format);
        let table = DirTable::local(copy.join("table")).unwrap();
        let store = open(&copy, "store.redb").await;
        recover_and_finish(&store, &table, format).await;
        store.close_async().await;
        // Reopened, the job is done: nothing to recover, nothing to commit.
        let store = open(&copy, "store.redb").await;
        let report = Committer::new(&store, &table).recover().await.unwrap();
        assert!(report.finished, "format {format}");
        store.close_async().await;
    }
}

#[tokio::test]
async fn each_fixture_restored_from_its_mirror_alone_recovers_and_finishes_every_row_once() {
    for format in FORMATS {
        let (_dir, copy) = copy(format);
        std::fs::remove_file(copy.join("store.redb")).unwrap();
        let table = DirTable::local(copy.join("table")).unwrap();
        let store = open(&copy, "restored.redb").await;
        recover_and_finish(&store, &table, format).await;
        store.close_async().await;
    }
}
