//! A job of many inputs through shared staging: N inputs (one small part each, `stage_and_seal` of a `for_key`
//! id, 256 seals in flight as 64 workers with 4 tasks each would have), a committer that adopts in rounds of the ids
//! its workers reported (`Inbox::adopt_expected`, up to 10,000 a round) and commits each round, then the job's
//! final commit. Each N runs in a child process of its own, on two stores: the local filesystem with 20 ms a
//! request (`FaultStore::set_latency`), and without (staging, mirror and table on disk either way). Measured:
//! wall time per input (the small job's: the median of three runs), the committer's lag (seals reported but not
//! yet adopted, at its peak), the process's peak heap growth (the unthrottled run), then the store's open of a
//! crash image (its file copied while the writer had it open), its restore from the mirror into an empty path (a
//! lost disk), and a `status` read (`inspect::Inspector::summary`), each at N against the same at the small N.
//!
//! `cargo bench --bench scale` runs 10,000 and 100,000; `SINKPOINT_SCALE_LARGE=1000000` sets the large N (the
//! one-million run takes minutes: see docs/BENCHMARKS.md), `SINKPOINT_SCALE_PLACE=local` or `throttled` runs one
//! store only, and `SINKPOINT_SCALE_ROUND_IDS` sets the round's size; quick mode (`cargo test --bench scale`): 200
//! and 2,000.

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use sinkpoint::inspect::Inspector;
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::shared::{Inbox, SharedStaging, Worker};
use sinkpoint::testkit::FaultStore;
use sinkpoint::{CheckpointId, Committer, DirTable, Store};

use common::{Goal, Report, fmt_dur, job, key, small_result, target};

/// Counts the heap's bytes in use and their peak.
#[global_allocator]
static HEAP: peak_alloc::PeakAlloc = peak_alloc::PeakAlloc;

const CHILD: &str = "SINKPOINT_SCALE_CHILD";
/// The latency of every request on the throttled store: a cross-region object store.
const REQUEST_LATENCY: Duration = Duration::from_millis(20);
/// Seals in flight at once: 64 workers with 4 tasks each.
const SEALS_IN_FLIGHT: usize = 256;
/// The most ids one committer round adopts, unless `SINKPOINT_SCALE_ROUND_IDS` says otherwise.
const ROUND_IDS_MAX: usize = 10_000;

fn round_ids_max() -> usize {
    std::env::var("SINKPOINT_SCALE_ROUND_IDS").ok().and_then(|v| v.parse().ok()).unwrap_or(ROUND_IDS_MAX)
}

/// Where the job's objects live.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Place {
    Throttled,
    Local,
}

/// What one child measured.
#[derive(Clone, Copy, Debug, Default)]
struct Measured {
    job_s: f64,
    lag_max: u64,
    heap_kib: u64,
    reopen_ms: f64,
    restore_ms: f64,
    status_ms: f64,
}

fn local(dir: &std::path::Path) -> LocalFileSystem {
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    LocalFileSystem::new_with_prefix(dir.join("objects")).unwrap()
}

/// The job's object store at `place`, in `dir`.
fn objects(place: Place, dir: &std::path::Path) -> Arc<dyn ObjectStore> {
    match place {
        // On disk, throttled: an in-memory store would hold the mirror's every snapshot in this process's heap
        // (a million-input job's mirror is gigabytes before an operator collects it).
        Place::Throttled => {
            let store = FaultStore::new(local(dir));
            store.set_latency(REQUEST_LATENCY);
            Arc::new(store)
        }
        Place::Local => Arc::new(local(dir)),
    }
}

async fn open_store(objects: &Arc<dyn ObjectStore>, file: &std::path::Path) -> Store {
    Store::builder(job(), target())
        .path(file)
        .mirror(objects.clone(), Path::from("mirror"), MirrorSettings::default())
        .open()
        .await
        .unwrap()
}

/// Runs the job of `n` inputs; returns its wall time in seconds and the committer's peak lag.
async fn run_job(n: u64, objects: &Arc<dyn ObjectStore>, store: &Store, table: &DirTable) -> (f64, u64) {
    let shared = SharedStaging::new(objects.clone(), "staging", job()).unwrap();
    let (sealed_tx, mut sealed_rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let reported = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers = {
        let (shared, reported) = (shared.clone(), reported.clone());
        tokio::spawn(async move {
            let worker = Worker::new(shared, "scale").unwrap();
            let seals = (0..n).map(|i| {
                let (worker, tx, reported) = (&worker, sealed_tx.clone(), &reported);
                async move {
                    let id = CheckpointId::for_key(&key(i));
                    worker.stage_and_seal(&id, vec![key(i)], vec![small_result(i)]).await.unwrap();
                    reported.fetch_add(1, Ordering::Relaxed);
                    tx.send(i).unwrap();
                }
            });
            futures::stream::iter(seals).buffer_unordered(SEALS_IN_FLIGHT).collect::<Vec<()>>().await;
        })
    };
    let inbox = Inbox::new(shared);
    let (mut adopted, mut lag_max) = (0u64, 0u64);
    let round_max = round_ids_max();
    let mut round: Vec<CheckpointId> = Vec::with_capacity(round_max);
    while adopted < n {
        // Waits for one seal, then takes every reported one up to a round's worth.
        let first = sealed_rx.recv().await.expect("the workers stopped early");
        round.push(CheckpointId::for_key(&key(first)));
        while round.len() < round_max {
            match sealed_rx.try_recv() {
                Ok(i) => round.push(CheckpointId::for_key(&key(i))),
                Err(_) => break,
            }
        }
        lag_max = lag_max.max(reported.load(Ordering::Relaxed) - adopted);
        let report = inbox.adopt_expected(store, &round).await.unwrap();
        assert_eq!(report.adopted.len(), round.len(), "{report:?}");
        adopted += round.len() as u64;
        round.clear();
        Committer::new(store, table).commit_pending().await.unwrap();
    }
    workers.await.unwrap();
    Committer::new(store, table).finish().await.unwrap();
    (started.elapsed().as_secs_f64(), lag_max)
}

fn ms_of<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed().as_secs_f64() * 1000.0)
}

/// The job, then the reopen, the restore and the status read; prints the figures as one line.
fn child(place: Place, n: u64) {
    let rt = common::runtime();
    let dir = common::tempdir();
    let objects = objects(place, dir.path());
    let table = DirTable::local(dir.path().join("table")).unwrap();
    let heap_before = HEAP.current_usage();
    HEAP.reset_peak_usage();
    let mut m = Measured::default();
    let (file, crashed, restored) =
        (dir.path().join("committer.redb"), dir.path().join("crashed.redb"), dir.path().join("restored.redb"));
    rt.block_on(async {
        let store = open_store(&objects, &file).await;
        (m.job_s, m.lag_max) = run_job(n, &objects, &store, &table).await;
        m.heap_kib = (HEAP.peak_usage().saturating_sub(heap_before) / 1024) as u64;
        // A crash image: the file copied while its writer has it open (no clean shutdown recorded), then opened.
        store.flush().await.unwrap();
        std::fs::copy(&file, &crashed).unwrap();
        store.close_async().await;
        let started = Instant::now();
        let store = open_store(&objects, &crashed).await;
        m.reopen_ms = started.elapsed().as_secs_f64() * 1000.0;
        store.close_async().await;
        // A lost disk: no local file, the store restored from its mirror.
        let started = Instant::now();
        let store = open_store(&objects, &restored).await;
        m.restore_ms = started.elapsed().as_secs_f64() * 1000.0;
        assert!(store.is_finished().unwrap());
        store.close_async().await;
    });
    let (summary, status_ms) = ms_of(|| Inspector::open_file(&restored).unwrap().summary());
    m.status_ms = status_ms;
    let committed = summary.unwrap().counts.iter().map(|(_, c)| *c).sum::<u64>();
    assert_eq!(committed, n);
    println!("{} {} {} {} {} {}", m.job_s, m.lag_max, m.heap_kib, m.reopen_ms, m.restore_ms, m.status_ms);
}

fn measure(place: Place, n: u64) -> Measured {
    let out = Command::new(std::env::current_exe().unwrap()).env(CHILD, format!("{place:?} {n}")).output().unwrap();
    assert!(out.status.success(), "child {place:?} {n}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default().to_owned();
    let v: Vec<f64> = line.split_whitespace().map(|x| x.parse().unwrap_or(f64::NAN)).collect();
    assert_eq!(v.len(), 6, "child said {line:?}");
    Measured {
        job_s: v[0],
        lag_max: v[1] as u64,
        heap_kib: v[2] as u64,
        reopen_ms: v[3],
        restore_ms: v[4],
        status_ms: v[5],
    }
}

/// Runs of the small job: its wall time is seconds, where one stray process moves it by half, so the median of
/// three (by wall time) is its figure.
const SMALL_RUNS: usize = 3;

fn rows(report: &Report, place: Place, small: u64, large: u64) {
    let mut smalls: Vec<Measured> = (0..SMALL_RUNS).map(|_| measure(place, small)).collect();
    smalls.sort_by(|a, b| a.job_s.total_cmp(&b.job_s));
    let (s, l) = (smalls[SMALL_RUNS / 2], measure(place, large));
    let per_input = |m: &Measured, n: u64| Duration::from_secs_f64(m.job_s / n as f64);
    let what = match place {
        Place::Throttled => "object store, 20 ms a request",
        Place::Local => "local filesystem",
    };
    report.add(
        format!("{what}: wall time per input, {large} vs {small} inputs"),
        l.job_s / large as f64 / (s.job_s / small as f64),
        Goal::AtMost(1.2),
        format!(
            "{small}: {} ({:.1} s), lag at most {}; {large}: {} ({:.1} s), lag at most {}",
            fmt_dur(per_input(&s, small)),
            s.job_s,
            s.lag_max,
            fmt_dur(per_input(&l, large)),
            l.job_s,
            l.lag_max
        ),
    );
    if place == Place::Local {
        report.add(
            format!("{what}: peak heap growth of the job, {large} vs {small} inputs"),
            l.heap_kib.max(1) as f64 / s.heap_kib.max(1) as f64,
            Goal::Info,
            format!("{small}: +{} KiB; {large}: +{} KiB", s.heap_kib, l.heap_kib),
        );
    }
    for (name, a, b) in [
        ("store reopen after a crash", s.reopen_ms, l.reopen_ms),
        ("restore from the mirror after a lost disk", s.restore_ms, l.restore_ms),
        ("status (the store's summary)", s.status_ms, l.status_ms),
    ] {
        report.add(
            format!("{what}: {name}, {large} vs {small} checkpoints"),
            b / a,
            Goal::Info,
            format!("{small}: {a:.1} ms; {large}: {b:.1} ms"),
        );
    }
}

fn main() {
    if let Ok(arg) = std::env::var(CHILD) {
        let (place, n) = arg.split_once(' ').unwrap();
        let place = if place == "Local" { Place::Local } else { Place::Throttled };
        child(place, n.parse().unwrap());
        return;
    }
    let large_env = std::env::var("SINKPOINT_SCALE_LARGE").ok().and_then(|v| v.parse().ok());
    let (small, large) = if common::quick() { (200, 2_000) } else { (10_000, large_env.unwrap_or(100_000)) };
    let report = Report::default();
    let only = std::env::var("SINKPOINT_SCALE_PLACE").unwrap_or_default();
    if only != "throttled" {
        rows(&report, Place::Local, small, large);
    }
    if only != "local" {
        rows(&report, Place::Throttled, small, large);
    }
    report.print("A job of many inputs through shared staging");
}
