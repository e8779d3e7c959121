//! Shared-staging rows: a worker's requests and wall time per checkpoint against a Daft-style checkpoint store
//! (one put per stage call, one per seal) on the same counting object store throttled to 20 ms a request; the
//! committer's time from the last seal to the commit with 8 and 64 workers; and the committer's requests per round
//! and time per round as the checkpoints already committed grow from 1 k to 100 k (`SINKPOINT_SHARED_HISTORY` sets
//! another, such as 1 M; quick mode: 100 and 1 k), listings counted by pages of 1,000: a round that lists the
//! claims (`Inbox::adopt`: one page per 1,000 claims of the job) against one that reads the claims of the ids it
//! expects (`Inbox::adopt_expected`: flat; docs/decisions/0041-rounds-read-expected-claims.md), its time measured
//! on the store as it is and again with every request 20 ms long.
//!
//! `cargo bench --bench shared` (quick: `cargo test --bench shared`); `SINKPOINT_SHARED_CACHE_MIB` sets the
//! committer's page cache (default: the store's).

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use sinkpoint::mirror::MirrorSettings;
use sinkpoint::shared::{Inbox, SharedStaging, Worker};
use sinkpoint::testkit::FaultStore;
use sinkpoint::{Attempt, CheckpointId, Committer, DirTable, Part, StagePart, Store};

use common::{Goal, Report, fmt_dur, job, requests, small_result, target};

/// The latency of every request in the throttled rows: a cross-region object store.
const REQUEST_LATENCY: Duration = Duration::from_millis(20);

fn input(i: u64) -> Vec<u8> {
    format!("s3://in/{i:07}.parquet").into_bytes()
}

/// The Daft-style baseline: a put per stage call and a put per seal, nothing conditional.
async fn daft_style(objects: &dyn ObjectStore, i: u64) {
    let dir = Path::from(format!("daft/{i:07}"));
    let staged = PutPayload::from(small_result(i).bytes().to_vec());
    objects.put(&dir.clone().join("staged-0"), staged).await.unwrap();
    objects.put(&dir.join("sealed"), PutPayload::from_static(b"sealed")).await.unwrap();
}

/// Wall time and requests per call of `f`, run `n` times in turn.
fn measure<F, Fut>(rt: &tokio::runtime::Runtime, objects: &FaultStore<InMemory>, n: u64, f: F) -> (Duration, f64)
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let before = objects.counts();
    let started = Instant::now();
    for i in 0..n {
        rt.block_on(f(i));
    }
    (started.elapsed() / n as u32, (requests(objects.counts()) - requests(before)) as f64 / n as f64)
}

fn worker_rows(rt: &tokio::runtime::Runtime, report: &Report, checkpoints: u64) {
    let objects = Arc::new(FaultStore::new(InMemory::new()));
    objects.set_latency(REQUEST_LATENCY);
    let shared = SharedStaging::new(objects.clone(), "staging", job()).unwrap();
    let worker = Worker::new(shared, "bench").unwrap();
    let (daft_t, daft_r) = measure(rt, &objects, checkpoints, |i| daft_style(objects.as_ref(), i));
    let (two_t, two_r) = measure(rt, &objects, checkpoints, |i| {
        let worker = &worker;
        async move {
            let id = CheckpointId::for_key(&input(i));
            let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![input(i)]).results(vec![small_result(i)]);
            worker.stage(&id, part).await.unwrap();
            worker.seal(&id, 1).await.unwrap();
        }
    });
    let (one_t, one_r) = measure(rt, &objects, checkpoints, |i| {
        let worker = &worker;
        async move {
            let i = i + 1_000_000;
            worker
                .stage_and_seal(&CheckpointId::for_key(&input(i)), vec![input(i)], vec![small_result(i)])
                .await
                .unwrap();
        }
    });
    let figures = |t: Duration, r: f64| {
        format!("{r:.1} requests, {} per checkpoint (Daft-style: {daft_r:.1}, {})", fmt_dur(t), fmt_dur(daft_t))
    };
    report.add("worker stage + seal: requests vs Daft-style", two_r / daft_r, Goal::AtMost(1.0), figures(two_t, two_r));
    report.add(
        "worker stage + seal: time vs Daft-style",
        two_t.as_secs_f64() / daft_t.as_secs_f64(),
        Goal::AtMost(1.0),
        figures(two_t, two_r),
    );
    report.add("worker stage_and_seal: requests vs one put", one_r / 1.0, Goal::AtMost(1.0), figures(one_t, one_r));
}

/// A committer on `objects` (its mirror there too) and a table on an unthrottled store of its own.
async fn committer(objects: Arc<FaultStore<InMemory>>, dir: &std::path::Path) -> Store {
    let mut builder = Store::builder(job(), target());
    // An experiment's knob: the committer's page cache (`SINKPOINT_SHARED_CACHE_MIB`), to tell a round's cache
    // misses from its page writes.
    if let Some(mib) = std::env::var("SINKPOINT_SHARED_CACHE_MIB").ok().and_then(|v| v.parse::<usize>().ok()) {
        builder = builder.cache_bytes(mib << 20);
    }
    builder
        .path(dir.join("committer.redb"))
        .mirror(objects, Path::from("mirror"), MirrorSettings::default())
        .open()
        .await
        .unwrap()
}

/// Seals one checkpoint from each of `workers` workers at once, then measures one adopt-and-commit round.
fn last_seal_to_commit(rt: &tokio::runtime::Runtime, workers: u64) -> (Duration, u64) {
    let dir = common::tempdir();
    let objects = Arc::new(FaultStore::new(InMemory::new()));
    objects.set_latency(REQUEST_LATENCY);
    let shared = SharedStaging::new(objects.clone(), "staging", job()).unwrap();
    let table = DirTable::new(Arc::new(InMemory::new()), Path::from("table"));
    rt.block_on(async {
        let store = committer(objects.clone(), dir.path()).await;
        let seals = (0..workers).map(|w| {
            let shared = shared.clone();
            async move {
                let worker = Worker::new(shared, &format!("w{w}")).unwrap();
                worker
                    .stage_and_seal(&CheckpointId::for_key(&input(w)), vec![input(w)], vec![small_result(w)])
                    .await
                    .unwrap();
            }
        });
        futures::future::join_all(seals).await;
        let before = objects.counts();
        let started = Instant::now();
        let adopted = Inbox::new(shared.clone()).adopt(&store).await.unwrap();
        Committer::new(&store, &table).commit_pending().await.unwrap();
        assert_eq!(adopted.adopted.len() as u64, workers);
        (started.elapsed(), requests(objects.counts()) - requests(before))
    })
}

fn committer_rows(rt: &tokio::runtime::Runtime, report: &Report) {
    let (t8, r8) = last_seal_to_commit(rt, 8);
    let (t64, r64) = last_seal_to_commit(rt, 64);
    let figures = format!(
        "8 workers: {} and {r8} requests; 64 workers: {} and {r64} requests (20 ms a request)",
        fmt_dur(t8),
        fmt_dur(t64)
    );
    report.add(
        "committer last seal -> commit, 64 vs 8 workers",
        t64.as_secs_f64() / t8.as_secs_f64(),
        Goal::Info,
        figures,
    );
}

/// Rounds of expected ids measured after the history; the median is reported.
const EXPECTED_ROUNDS: u64 = 5;

/// What one adopt-and-commit round cost.
#[derive(Clone, Copy)]
struct Round {
    requests: u64,
    listed: u64,
    /// The whole round: adoption, then the commit.
    time: Duration,
    /// Its adoption alone.
    adopt: Duration,
    /// Bytes the process read and wrote through system calls during the round (the committer's page reads and
    /// page writes: its mirror and the table are in memory), 0 where `/proc/self/io` does not exist.
    read: u64,
    written: u64,
}

/// Seals `ids` (one input each) through `worker`, 32 at once.
async fn seal_all(worker: &Worker, inputs: std::ops::Range<u64>) {
    let seals = inputs.map(|i| async move {
        worker.stage_and_seal(&CheckpointId::for_key(&input(i)), vec![input(i)], vec![small_result(i)]).await.unwrap()
    });
    futures::stream::iter(seals).buffer_unordered(32).collect::<Vec<()>>().await;
}

fn ids(inputs: std::ops::Range<u64>) -> Vec<CheckpointId> {
    inputs.map(|i| CheckpointId::for_key(&input(i))).collect()
}

/// The rounds measured after a history: one listing the claims, then the median of rounds of expected ids on the
/// store as it is (no latency: the committer's local work) and with every request `REQUEST_LATENCY` long (what a
/// committer on an object store meets).
#[derive(Clone, Copy)]
struct Rounds {
    listing: Round,
    expected: Round,
    throttled: Round,
}

/// Once `history` checkpoints are committed (adopted by rounds of 1,000 expected ids), one round adopting and
/// committing 8 new checkpoints by listing the claims (`adopt`), then the median of `EXPECTED_ROUNDS` rounds each
/// adopting 8 more by their ids (`adopt_expected`), each with its requests, objects listed and wall time; then as
/// many again with the staging and the mirror's store throttled to `REQUEST_LATENCY` a request.
fn rounds_after(rt: &tokio::runtime::Runtime, history: u64) -> Rounds {
    let dir = common::tempdir();
    let objects = Arc::new(FaultStore::new(InMemory::new()));
    let shared = SharedStaging::new(objects.clone(), "staging", job()).unwrap();
    let table = DirTable::new(Arc::new(InMemory::new()), Path::from("table"));
    rt.block_on(async {
        let store = committer(objects.clone(), dir.path()).await;
        let worker = Worker::new(shared.clone(), "history").unwrap();
        let inbox = Inbox::new(shared.clone());
        let batch = 1000.min(history);
        for start in (0..history).step_by(batch as usize) {
            seal_all(&worker, start..start + batch).await;
            inbox.adopt_expected(&store, &ids(start..start + batch)).await.unwrap();
            Committer::new(&store, &table).commit_pending().await.unwrap();
        }
        let measure = |expected: Option<Vec<CheckpointId>>| {
            let (objects, store, inbox, table) = (&objects, &store, &inbox, &table);
            async move {
                let (before, io_before) = (objects.counts(), common::io_bytes().unwrap_or_default());
                let started = Instant::now();
                let report = match expected {
                    Some(ids) => inbox.adopt_expected(store, &ids).await.unwrap(),
                    None => inbox.adopt(store).await.unwrap(),
                };
                let adopt = started.elapsed();
                Committer::new(store, table).commit_pending().await.unwrap();
                let (time, after, io_after) =
                    (started.elapsed(), objects.counts(), common::io_bytes().unwrap_or_default());
                assert_eq!(report.adopted.len(), 8, "{report:?}");
                let (requests, listed) = (requests(after) - requests(before), after.listed - before.listed);
                let (read, written) = (io_after.0 - io_before.0, io_after.1 - io_before.1);
                Round { requests, listed, time, adopt, read, written }
            }
        };
        seal_all(&worker, history..history + 8).await;
        let listing = measure(None).await;
        // The median of a few rounds: a round's flush sometimes carries the mirror's upkeep.
        let mut medians = Vec::new();
        for (pass, latency) in [Duration::ZERO, REQUEST_LATENCY].into_iter().enumerate() {
            let mut rounds = Vec::new();
            for r in 0..EXPECTED_ROUNDS {
                let first = history + 8 + 8 * (EXPECTED_ROUNDS * pass as u64 + r);
                seal_all(&worker, first..first + 8).await;
                objects.set_latency(latency);
                rounds.push(measure(Some(ids(first..first + 8))).await);
                objects.set_latency(Duration::ZERO);
            }
            rounds.sort_by_key(|r| r.time);
            medians.push(rounds[rounds.len() / 2]);
        }
        Rounds { listing, expected: medians[0], throttled: medians[1] }
    })
}

use futures::StreamExt as _;

fn history_rows(rt: &tokio::runtime::Runtime, report: &Report, small: u64, large: u64) {
    let (s, l) = (rounds_after(rt, small), rounds_after(rt, large));
    let round = |r: Round| {
        format!(
            "{} requests, {} objects listed, {} (adoption {}), {} KiB read, {} KiB written",
            r.requests,
            r.listed,
            fmt_dur(r.time),
            fmt_dur(r.adopt),
            r.read >> 10,
            r.written >> 10
        )
    };
    let figures = |s: Round, l: Round| format!("after {small}: {}; after {large}: {}", round(s), round(l));
    let ratio = |s: Round, l: Round| l.time.as_secs_f64() / s.time.as_secs_f64();
    report.add(
        format!("committer round listing the claims: requests, {large} vs {small} committed"),
        l.listing.requests as f64 / s.listing.requests as f64,
        Goal::Info,
        figures(s.listing, l.listing),
    );
    report.add(
        format!("committer round of expected ids: requests, {large} vs {small} committed"),
        l.expected.requests as f64 / s.expected.requests as f64,
        Goal::AtMost(1.1),
        figures(s.expected, l.expected),
    );
    report.add(
        format!("committer round of expected ids: time, {large} vs {small} committed"),
        ratio(s.expected, l.expected),
        Goal::AtMost(1.1),
        figures(s.expected, l.expected),
    );
    report.add(
        format!("the same round at 20 ms a request: time, {large} vs {small} committed"),
        ratio(s.throttled, l.throttled),
        Goal::AtMost(1.1),
        figures(s.throttled, l.throttled),
    );
}

/// The larger history of the full run: `SINKPOINT_SHARED_HISTORY` (say 1000000), else 100,000.
fn large_history() -> u64 {
    std::env::var("SINKPOINT_SHARED_HISTORY").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

fn main() {
    let quick = common::quick();
    let rt = common::runtime();
    let report = Report::default();
    worker_rows(&rt, &report, if quick { 3 } else { 50 });
    committer_rows(&rt, &report);
    let (small, large) = if quick { (100, 1_000) } else { (1_000, large_history()) };
    history_rows(&rt, &report, small, large);
    report.print("Shared staging: workers on many machines");
}
