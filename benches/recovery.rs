//! Recovery rows: opening a store after a crash (a child process that built it is SIGKILLed, so redb finds no
//! clean shutdown and repairs) vs raw redb opening a copy of the same crashed file; and the peak memory of
//! iterating the whole skip set (`Store::processed_keys`) at 100 k and 1 M keys, vs a raw redb scan of the same
//! key table, each in a child process of its own so that one measurement's heap never hides another's.
//!
//! The 1 M-key fixture (10 k checkpoints of 100 keys) is built once and cached under
//! `$SINKPOINT_CACHE/bench/` (default `~/.cache/sinkpoint/bench/`); quick mode (`cargo test --bench recovery`)
//! builds tiny fixtures in a temporary directory instead and never touches the cache.

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redb::{Database, ReadableDatabase, TableDefinition};
use sinkpoint::testkit::RawProtocol;
use sinkpoint::{StagingDurability, Store};

use common::{Goal, Op, Report, cid, fmt_dur, key, small_result};
use sinkpoint::{Attempt, Part, StagePart};

/// sinkpoint's key index, read raw by the baseline scan (the table's name and types are the store's own).
const KEYS: TableDefinition<&[u8], &str> = TableDefinition::new("keys");

/// Criterion's samples per bench (its minimum): each is one open of a fresh copy of the crashed file.
/// The ratio comes from the paired rounds below, not from these.
const SAMPLE_SIZE: usize = 10;
/// Paired rounds of one store open and one raw open each, behind the ratio.
const OPEN_ROUNDS: usize = 11;
/// Bumped whenever the fixture's shape changes, so that a stale cached file is never measured.
const FIXTURE_VERSION: u32 = 1;
/// Source keys per checkpoint in every fixture: 1 M keys over 10 k checkpoints.
const KEYS_PER_CHECKPOINT: u64 = 100;
/// Checkpoints per commit key when the fixture is built.
const CHECKPOINTS_PER_COMMIT: u64 = 1000;
/// Checkpoints left Staged at the crash (orphans the open must find), and left Sealed but uncommitted (at
/// most a tenth of them).
const STAGED_AT_CRASH: u64 = 10;
const SEALED_AT_CRASH: u64 = 990;
/// Concurrent tasks building a fixture, so that group commit folds their calls.
const BUILD_TASKS: u64 = 32;

/// The environment variables of the child processes.
const CHILD: &str = "SINKPOINT_BENCH_CHILD";
const CHILD_PATH: &str = "SINKPOINT_BENCH_PATH";
const CHILD_KEYS: &str = "SINKPOINT_BENCH_KEYS";

fn main() {
    if let Ok(mode) = std::env::var(CHILD) {
        child(&mode);
        return;
    }
    let quick = common::quick();
    let (big, small) = if quick { (20_000, 5_000) } else { (1_000_000, 100_000) };
    let report = Report::default();
    let dir = common::tempdir();
    let mut c = common::criterion(SAMPLE_SIZE, Duration::from_secs(if quick { 1 } else { 5 }));

    let big_fixture = fixture(big, dir.path(), quick);
    let size = std::fs::metadata(&big_fixture).map(|m| m.len()).unwrap_or(0);
    println!("open after a crash: {big} keys, a {:.1} MiB file", size as f64 / (1024.0 * 1024.0));
    let rt = common::runtime();
    let copy = dir.path().join("open.redb");
    let mut ops = open_ops(&rt, &big_fixture, &copy);
    common::bench_ops(&mut c, "open-after-crash", &mut ops);
    c.final_summary();
    let pairs = [("sinkpoint-store-open", "redb-open")];
    let r = common::paired_rounds(&mut ops, &pairs, if quick { 1 } else { OPEN_ROUNDS }, Duration::ZERO);
    drop(ops);
    let _ = std::fs::remove_file(&copy);
    if let Some(ratio) = r.ratio("sinkpoint-store-open", "redb-open") {
        let spread = r.spread("sinkpoint-store-open", "redb-open").unwrap_or_default();
        report.add(
            format!(
                "open after a crash, {big} keys / {} checkpoints: Store::open / raw redb open (time)",
                big / KEYS_PER_CHECKPOINT
            ),
            ratio,
            Goal::AtMost(2.0),
            format!(
                "store {} vs redb {} (rounds {:.2}..{:.2})",
                fmt_dur(r.time("sinkpoint-store-open").unwrap_or_default()),
                fmt_dur(r.time("redb-open").unwrap_or_default()),
                spread.0,
                spread.1
            ),
        );
    }

    let small_fixture = fixture(small, dir.path(), quick);
    let scans: Vec<(u64, Scan, Scan)> = [(small, &small_fixture), (big, &big_fixture)]
        .into_iter()
        .map(|(keys, f)| (keys, scan(f, dir.path(), "scan-store", keys), scan(f, dir.path(), "scan-raw", keys)))
        .collect();
    println!("\nskip-set scans (kB of RSS; peaks are above the RSS of the open store, reset before each pass):");
    println!("| keys | who | RSS open | cold pass peak | warm pass peak | warm pass time |");
    println!("| ---: | --- | ---: | ---: | ---: | ---: |");
    for (keys, store, raw) in &scans {
        for (who, s) in [("sinkpoint processed_keys", store), ("raw redb range scan", raw)] {
            println!(
                "| {keys} | {who} | {} | +{} | +{} | {} |",
                s.rss_open_kb,
                s.cold_peak_kb,
                s.warm_peak_kb,
                fmt_dur(s.warm_time)
            );
        }
    }
    let (small_store, big_store, big_raw) = (&scans[0].1, &scans[1].1, &scans[1].2);
    report.add(
        format!("skip-set iteration, warm cache: peak RSS growth at {big} keys / at {small} keys (floored at 1 MiB)"),
        big_store.warm_peak_kb.max(1024) as f64 / small_store.warm_peak_kb.max(1024) as f64,
        Goal::AtMost(1.5),
        format!("+{} kB vs +{} kB", big_store.warm_peak_kb, small_store.warm_peak_kb),
    );
    report.add(
        format!("skip-set iteration, cold cache, {big} keys: peak RSS growth, sinkpoint / raw redb scan"),
        big_store.cold_peak_kb.max(1024) as f64 / big_raw.cold_peak_kb.max(1024) as f64,
        Goal::AtMost(1.5),
        format!(
            "+{} kB vs +{} kB (redb's read cache filling: bounded by its 1 GiB default)",
            big_store.cold_peak_kb, big_raw.cold_peak_kb
        ),
    );
    report.print("recovery: open after a crash, skip-set memory");
}

// ---------------------------------------------------------------------------------------------------------
// The fixture: built in a child process that is killed while the store is open.

/// The crashed store file of `keys` processed keys: cached in full mode, built in `scratch` in quick mode.
fn fixture(keys: u64, scratch: &Path, quick: bool) -> PathBuf {
    let name = format!("crashed-{keys}-keys-v{FIXTURE_VERSION}-sinkpoint-{}.redb", env!("CARGO_PKG_VERSION"));
    let path = if quick {
        scratch.join(&name)
    } else {
        let root = std::env::var_os("SINKPOINT_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/sinkpoint")))
            .expect("SINKPOINT_CACHE or HOME");
        root.join("bench").join(&name)
    };
    if path.exists() && check_fixture(&path, keys, scratch) {
        println!("fixture: using the cached {}", path.display());
        return path;
    }
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("the fixture's directory");
    let building = path.with_extension("building");
    let _ = std::fs::remove_file(&building);
    let started = Instant::now();
    let mut child = Command::new(std::env::current_exe().expect("the bench binary"))
        .env(CHILD, "build")
        .env(CHILD_PATH, &building)
        .env(CHILD_KEYS, keys.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the builder");
    let stdout = child.stdout.take().expect("the builder's stdout");
    let ready = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l.starts_with("READY"));
    assert!(ready, "the builder died before the store was built");
    // SIGKILL while the store is open: no clean shutdown, which is what the row measures.
    child.kill().expect("kill the builder");
    child.wait().expect("reap the builder");
    std::fs::rename(&building, &path).expect("publish the fixture");
    println!("fixture: built {keys} keys in {}, killed while open: {}", fmt_dur(started.elapsed()), path.display());
    assert!(check_fixture(&path, keys, scratch), "the fresh fixture fails its check");
    path
}

/// Whether a copy of the fixture opens as the store it should be, and needs a repair (it is a crash image).
fn check_fixture(path: &Path, keys: u64, scratch: &Path) -> bool {
    let copy = scratch.join("check.redb");
    std::fs::copy(path, &copy).expect("copy the fixture");
    let repaired = Arc::new(AtomicU64::new(0));
    let seen = repaired.clone();
    let raw = Database::builder()
        .set_repair_callback(move |_| {
            seen.fetch_add(1, Ordering::Relaxed);
        })
        .open(&copy);
    let ok = match raw {
        Err(e) => {
            println!("fixture: {} does not open ({e}); rebuilding", path.display());
            false
        }
        Ok(db) => {
            drop(db);
            let rt = common::runtime();
            let ok = rt.block_on(async {
                let store = Store::builder(common::job(), common::target()).path(&copy).must_exist().open().await;
                match store {
                    Err(e) => {
                        println!("fixture: not a store of this version ({e}); rebuilding");
                        false
                    }
                    Ok(store) => {
                        let last = store.is_processed(&key(keys - 1 - STAGED_AT_CRASH * KEYS_PER_CHECKPOINT));
                        let ok = last.unwrap_or(false) && store.orphans().len() as u64 == STAGED_AT_CRASH;
                        store.close();
                        ok
                    }
                }
            });
            ok && repaired.load(Ordering::Relaxed) > 0
        }
    };
    let _ = std::fs::remove_file(&copy);
    ok
}

fn child(mode: &str) {
    let path = PathBuf::from(std::env::var_os(CHILD_PATH).expect("the child's path"));
    let keys: u64 = std::env::var(CHILD_KEYS).expect("the child's key count").parse().expect("a key count");
    match mode {
        "build" => build(&path, keys),
        "scan-store" | "scan-raw" => child_scan(&path, mode == "scan-store", keys),
        other => panic!("unknown child mode {other}"),
    }
}

/// Builds the fixture, says READY and waits to be killed: 10 k checkpoints (for 1 M keys) of 100 keys and one
/// write result each; all but the last 1,000 committed under keys of 1,000 checkpoints, then 990 Sealed and
/// 10 left Staged.
fn build(path: &Path, keys: u64) {
    let rt = common::runtime();
    rt.block_on(async {
        // Stage calls need not be durable while building: every seal makes them so.
        let store = Arc::new(common::open_store(path, StagingDurability::None).await);
        let checkpoints = keys / KEYS_PER_CHECKPOINT;
        let tasks: Vec<_> = (0..BUILD_TASKS)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    for c in (t..checkpoints).step_by(BUILD_TASKS as usize) {
                        let id = cid(&format!("input-{c:06}"));
                        let batch: Vec<Vec<u8>> =
                            (c * KEYS_PER_CHECKPOINT..(c + 1) * KEYS_PER_CHECKPOINT).map(key).collect();
                        store
                            .stage(
                                &id,
                                StagePart::new(Attempt::FIRST, Part::FIRST).keys(batch).results(vec![small_result(c)]),
                            )
                            .await
                            .expect("stage");
                        if c < checkpoints - STAGED_AT_CRASH {
                            store.seal(&id, 1).await.expect("seal");
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a builder task");
        }
        let committed = checkpoints - STAGED_AT_CRASH - SEALED_AT_CRASH.min(checkpoints / 10);
        for (n, start) in (0..committed).step_by(CHECKPOINTS_PER_COMMIT as usize).enumerate() {
            let ids: Vec<_> = (start..(start + CHECKPOINTS_PER_COMMIT).min(committed))
                .map(|c| cid(&format!("input-{c:06}")))
                .collect();
            store.begin_commit(n as u64, &ids, None, false).await.expect("begin commit");
            store.mark_committed(n as u64).await.expect("mark committed");
        }
        let stats = store.stats();
        println!("READY {} calls in {} commits", stats.calls, stats.commits);
        // Keep the store open until the parent kills this process.
        std::mem::forget(store);
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    });
}

// ---------------------------------------------------------------------------------------------------------
// Open after a crash.

/// The two opens of a fresh copy of the crashed fixture (copied before the clock starts: an open repairs the
/// file and then shuts it down cleanly, so each open needs its own crash image).
fn open_ops<'a>(rt: &'a tokio::runtime::Runtime, fixture: &'a Path, copy: &'a Path) -> Vec<Op<'a>> {
    let store_open = Op::new("sinkpoint-store-open", 1, 1, move |iters| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            std::fs::copy(fixture, copy).expect("copy the fixture");
            let start = Instant::now();
            let store = rt.block_on(Store::builder(common::job(), common::target()).path(copy).must_exist().open());
            total += start.elapsed();
            let store = store.expect("open the crashed store");
            assert_eq!(store.orphans().len() as u64, STAGED_AT_CRASH, "the orphans found at open");
            store.close();
        }
        total
    });
    let raw_open = Op::new("redb-open", 1, 1, move |iters| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            std::fs::copy(fixture, copy).expect("copy the fixture");
            let repaired = Arc::new(AtomicU64::new(0));
            let seen = repaired.clone();
            let start = Instant::now();
            let db = Database::builder()
                .set_repair_callback(move |_| {
                    seen.fetch_add(1, Ordering::Relaxed);
                })
                .open(copy);
            total += start.elapsed();
            drop(db.expect("raw open of the crashed file"));
            assert!(repaired.load(Ordering::Relaxed) > 0, "the file must need a repair: it is a crash image");
        }
        total
    });
    vec![store_open, raw_open]
}

// ---------------------------------------------------------------------------------------------------------
// Peak memory of a whole skip-set scan.

struct Scan {
    rss_open_kb: u64,
    cold_peak_kb: u64,
    warm_peak_kb: u64,
    warm_time: Duration,
}

/// Runs one scan child on a fresh copy of `fixture` and parses its answer.
fn scan(fixture: &Path, scratch: &Path, mode: &str, keys: u64) -> Scan {
    let copy = scratch.join(format!("{mode}.redb"));
    std::fs::copy(fixture, &copy).expect("copy the fixture");
    // Repair the crash image first (an open and a clean close), so that neither child pays for redb's repair,
    // which reads the whole file and would warm one cache and not the other.
    let rt = common::runtime();
    rt.block_on(Store::builder(common::job(), common::target()).path(&copy).must_exist().open())
        .expect("open the fixture")
        .close();
    let out = Command::new(std::env::current_exe().expect("the bench binary"))
        .env(CHILD, mode)
        .env(CHILD_PATH, &copy)
        .env(CHILD_KEYS, keys.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the scan child");
    assert!(out.status.success(), "the {mode} child failed: {:?}", out.status);
    let _ = std::fs::remove_file(&copy);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("SCAN ")).expect("the scan child's answer");
    let f: Vec<u64> = line.split_whitespace().skip(1).map(|v| v.parse().expect("a number")).collect();
    Scan { rss_open_kb: f[0], cold_peak_kb: f[1], warm_peak_kb: f[2], warm_time: Duration::from_nanos(f[3]) }
}

/// One of `VmRSS`/`VmHWM` of this process, in kB.
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with(field)).expect("the status field");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("a kB figure")
}

/// Resets this process's RSS high-water mark to its current RSS (Linux `clear_refs`, value 5). Where that is
/// refused the peaks run from the process's start instead, which overstates them: said once, not fatal, so that
/// the quick mode still runs everywhere.
fn reset_peak() {
    if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("cannot reset the RSS high-water mark ({e}): the peaks below count from the process's start");
    }
}

/// Opens the store (or the raw file), then scans every processed key twice, each pass from a reset high-water
/// mark: the cold pass fills redb's read cache, the warm one shows what iterating itself holds.
fn child_scan(path: &Path, store: bool, keys: u64) {
    let rt = common::runtime();
    let (store, raw) = if store {
        let s = rt.block_on(Store::builder(common::job(), common::target()).path(path).must_exist().open());
        (Some(s.expect("open the store")), None)
    } else {
        (None, Some(Database::open(path).expect("raw open")))
    };
    let pass = || -> u64 {
        let mut seen = 0u64;
        match (&store, &raw) {
            (Some(s), _) => {
                for k in s.processed_keys() {
                    std::hint::black_box(k.expect("a key"));
                    seen += 1;
                }
            }
            (_, Some(db)) => {
                let txn = db.begin_read().expect("raw read");
                let t = txn.open_table(KEYS).expect("the keys table");
                for entry in t.range::<&[u8]>(..).expect("raw range") {
                    std::hint::black_box(entry.expect("an entry").0.value().len());
                    seen += 1;
                }
            }
            _ => unreachable!("one of the two is open"),
        }
        seen
    };
    let rss_open = status_kb("VmRSS:");
    reset_peak();
    let seen = pass();
    let cold = status_kb("VmHWM:").saturating_sub(rss_open);
    let expected = keys - STAGED_AT_CRASH * KEYS_PER_CHECKPOINT;
    assert_eq!(seen, expected, "every processed key, once");
    let rss_warm = status_kb("VmRSS:");
    reset_peak();
    let start = Instant::now();
    assert_eq!(pass(), expected, "every processed key, once");
    let warm_time = start.elapsed();
    let warm = status_kb("VmHWM:").saturating_sub(rss_warm);
    println!("SCAN {rss_open} {cold} {warm} {}", warm_time.as_nanos());
}
