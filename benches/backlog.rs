//! A large backlog (issue 15): `commit_pending` over 10,000 and 100,000 Sealed checkpoints (one small result
//! each), its wall time and the growth of the process's peak resident memory while it runs, each size in a child
//! process of its own so one measurement's heap never hides another's. Linear time means the 100 k / 10 k time
//! ratio is about 10; flat memory means the peak grows by about the same at both sizes (one key's results, not
//! the backlog's: the committer reads one commit's ids and counts at a time, then that key's results after its
//! intent). The peak is measured twice: the heap's (every allocation counted by the global allocator below,
//! redb's page cache included) and the process's resident set (which also holds what the C allocator keeps after
//! a free). Below `COMMIT_CHECKPOINTS_MAX` (10,000) the whole backlog is one commit, so quick mode's sizes grow
//! with the checkpoints by design; the bound shows from 10,000 up.
//!
//! `cargo bench --bench backlog`; quick mode (`cargo test --bench backlog`): 200 and 2,000. `BACKLOG_CACHE_MIB=N`
//! sets the store's redb cache (`StoreBuilder::cache_bytes`; the default is 64 MiB).

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use sinkpoint::{Attempt, CheckpointId, Committer, DirTable, Part, StagePart, Store};

use common::{Goal, Report, job, key, small_result, target};

/// Counts the heap's bytes in use and their peak.
#[global_allocator]
static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

const CHILD: &str = "SINKPOINT_BACKLOG_CHILD";

/// Peak resident memory so far (VmHWM), in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What one child measured.
struct Measured {
    ms: f64,
    /// Peak resident set growth while committing.
    rss_kib: u64,
    /// Peak heap growth while committing.
    heap_kib: u64,
}

/// Builds `n` Sealed checkpoints, then commits them; prints "ms rss_growth_kib heap_growth_kib".
fn child(n: u64) {
    let rt = common::runtime();
    let dir = common::tempdir();
    rt.block_on(async {
        let mut builder = Store::builder(job(), target()).path(dir.path().join("s.redb"));
        if let Ok(mib) = std::env::var("BACKLOG_CACHE_MIB") {
            builder = builder.cache_bytes(mib.parse::<usize>().unwrap() << 20);
        }
        let store = Arc::new(builder.open().await.unwrap());
        let tasks = (0..32u64).map(|t| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in (t..n).step_by(32) {
                    let part =
                        StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(i)]).results(vec![small_result(i)]);
                    store.stage_and_seal(&CheckpointId::new(format!("c{i:07}")).unwrap(), part, 1).await.unwrap();
                }
            })
        });
        for task in futures::future::join_all(tasks).await {
            task.unwrap();
        }
        // The table on disk, so that its commit objects are not counted in this process's memory.
        let table = DirTable::local(dir.path().join("table")).unwrap();
        let before = peak_kib();
        HEAP.reset_peak_usage();
        let heap_before = HEAP.current_usage();
        let started = Instant::now();
        let report = Committer::new(&store, &table).commit_pending().await.unwrap();
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        assert!(!report.committed_keys.is_empty());
        let heap_kib = HEAP.peak_usage().saturating_sub(heap_before) / 1024;
        println!("{ms:.1} {} {heap_kib}", peak_kib().saturating_sub(before));
    });
}

fn measure(n: u64) -> Measured {
    let out = Command::new(std::env::current_exe().unwrap()).env(CHILD, n.to_string()).output().unwrap();
    assert!(out.status.success(), "child {n}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default().to_owned();
    let mut it = line.split_whitespace();
    let ms: f64 = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("child said {line:?}"));
    let mut kib = || -> u64 { it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("child said {line:?}")) };
    let (rss_kib, heap_kib) = (kib(), kib());
    Measured { ms, rss_kib, heap_kib }
}

fn main() {
    if let Ok(n) = std::env::var(CHILD) {
        child(n.parse().unwrap());
        return;
    }
    let (small, large) = if common::quick() { (200, 2_000) } else { (10_000, 100_000) };
    let (s, l) = (measure(small), measure(large));
    let (t_small, t_large) = (s.ms, l.ms);
    let report = Report::default();
    let scale = (large / small) as f64;
    report.add(
        format!("commit_pending time per checkpoint, {large} vs {small}"),
        (t_large / large as f64) / (t_small / small as f64),
        Goal::AtMost(1.5),
        format!("{small}: {t_small:.0} ms; {large}: {t_large:.0} ms ({scale}x the checkpoints)"),
    );
    report.add(
        format!("commit_pending peak heap growth, {large} vs {small} (flat: at most 1.5)"),
        l.heap_kib.max(1) as f64 / s.heap_kib.max(1) as f64,
        // Quick mode's backlog is one commit, whose memory grows with its checkpoints by design.
        if common::quick() { Goal::Info } else { Goal::AtMost(1.5) },
        format!("{small}: +{} KiB; {large}: +{} KiB (every allocation, redb's cache included)", s.heap_kib, l.heap_kib),
    );
    report.add(
        format!("commit_pending peak RSS growth, {large} vs {small}"),
        l.rss_kib.max(1) as f64 / s.rss_kib.max(1) as f64,
        Goal::Info,
        format!(
            "{small}: +{} KiB; {large}: +{} KiB (what the C allocator keeps after a free included)",
            s.rss_kib, l.rss_kib
        ),
    );
    report.print("A large backlog");
}
