//! The quick-start job as a newcomer runs it: a run that ends normally leaves its store file cleanly closed (the
//! operator CLI reads it as it is, with no repair), and what it prints says what happened in words: the flags it
//! takes, the recovery case it met (F1, F2, U), the keys it committed, a store restored from its mirror.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

const CRASH_EXIT_CODE: i32 = 86;

fn job(dir: &Path, extra: &[&str]) -> Output {
    Command::new(common::job_binary())
        .args(["--dir", dir.to_str().unwrap(), "--inputs", "12", "--rows", "10", "--workers", "3"])
        .args(extra)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A clean run ends with the table whole and exit 0.
fn clean(dir: &Path, extra: &[&str]) -> String {
    let out = job(dir, extra);
    let log = text(&out);
    assert!(out.status.success(), "the job failed: {:?}\n{log}", out.status);
    assert!(log.contains("table: 120 rows, 0 duplicates, 0 missing"), "{log}");
    log
}

/// What `sinkpoint status --store` sees: redb opens a cleanly closed file read-only as it is; a file whose writer
/// never closed it needs a repair first (`RepairAborted`), and the CLI then calls it "left unclean by a crash".
fn assert_closed_cleanly(path: &Path, log: &str) {
    match redb::Builder::new().open_read_only(path) {
        Ok(_) => {}
        Err(redb::DatabaseError::RepairAborted) => {
            panic!("{} was left unclean by a run that ended normally; its output:\n{log}", path.display())
        }
        Err(e) => panic!("{}: {e}\n{log}", path.display()),
    }
}

/// No Rust `Debug` in what the job prints.
fn assert_in_words(log: &str) {
    for debug in ["Some(", "None", "[]"] {
        assert!(!log.contains(debug), "the job's output shows {debug:?}:\n{log}");
    }
}

#[test]
fn every_run_that_ends_normally_closes_its_store_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("demo");
    let store = dir.join("sink.redb");
    // A first run, a rerun (the fast path), a run committing round by round, and the distributed shape.
    let log = clean(&dir, &[]);
    assert_closed_cleanly(&store, &log);
    let log = clean(&dir, &[]);
    assert!(log.contains("fast path"), "{log}");
    assert_closed_cleanly(&store, &log);
    let log = clean(&dir, &["--fresh", "--commit-every", "4"]);
    assert_closed_cleanly(&store, &log);
    let log = clean(&dir, &["--fresh", "--worker-processes", "2"]);
    assert_closed_cleanly(&store, &log);
    // Without a mirror too.
    let log = clean(&root.path().join("no-mirror"), &["--no-mirror"]);
    assert_closed_cleanly(&root.path().join("no-mirror").join("sink.redb"), &log);
}

#[test]
fn help_exits_zero_listing_the_crash_points_and_a_misspelt_point_is_named() {
    let out = Command::new(common::job_binary()).arg("--help").output().unwrap();
    let help = text(&out);
    assert_eq!(out.status.code(), Some(0), "{help}");
    for point in
        ["after-stage", "after-seal", "after-begin-commit", "after-target-commit-before-mark", "unknown-outcome"]
    {
        assert!(help.contains(point), "--help does not list {point}:\n{help}");
    }
    let out = Command::new(common::job_binary()).args(["--crash-at", "after-comit"]).output().unwrap();
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("unknown crash point after-comit; one of after-stage, "), "{said}");
}

#[test]
fn what_the_job_prints_says_what_happened_in_words() {
    let root = tempfile::tempdir().unwrap();
    // Committed round by round: every key is counted, not only the last call's.
    let log = clean(&root.path().join("rounds"), &["--commit-every", "4"]);
    assert!(log.contains("3 table commits (keys 0 to 2)"), "{log}");
    assert_in_words(&log);
    let log = clean(&root.path().join("workers"), &["--worker-processes", "2"]);
    assert!(log.contains("adopted 12 checkpoints sealed by the workers"), "{log}");
    assert_in_words(&log);

    // The three recovery cases, each named.
    for (point, case) in [
        ("after-target-commit-before-mark", "F1: key 0 had landed in the table but was not marked; marked committed"),
        ("after-begin-commit", "F2: key 0 was recorded but had not landed; committed again under the same key"),
        ("unknown-outcome", "U: key 0's outcome was unknown; the probe found it in the table; marked committed"),
    ] {
        let dir = root.path().join(point);
        let out = job(&dir, &["--crash-at", point]);
        let crashed = text(&out);
        assert_eq!(out.status.code(), Some(CRASH_EXIT_CODE), "{crashed}");
        assert!(crashed.contains(&format!("crash: stopping the process at {point}")), "{crashed}");
        let log = clean(&dir, &[]);
        assert!(log.contains(case), "the rerun after {point} does not say {case:?}:\n{log}");
        assert_in_words(&log);
        assert_closed_cleanly(&dir.join("sink.redb"), &log);
    }

    // The local file lost: the run says it restored the store from the mirror.
    let dir = root.path().join("lost");
    clean(&dir, &["--commit-every", "4"]);
    std::fs::remove_file(dir.join("sink.redb")).unwrap();
    let log = clean(&dir, &[]);
    assert!(log.contains("restored from the mirror"), "{log}");
    assert_in_words(&log);
}
