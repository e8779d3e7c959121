//! Shared-staging rows: a worker's requests and wall time per checkpoint against a Daft-style checkpoint store
//! (one put per stage call, one per seal) on the same counting object store throttled to 20 ms a request; the
//! committer's time from the last seal to the commit with 8 and 64 workers; and the committer's requests per round
//! as the checkpoints already committed grow from 1 k to 100 k (quick mode: 100 and 1 k), listings counted by
//! pages of 1,000. They grow with the history because the committer finds one-shot seals by listing the claims
//! (one page per 1,000 a round; docs/decisions/0014-seals-found-by-listing-claims.md says why).
//!
//! `cargo bench --bench shared` (quick: `cargo test --bench shared`).

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
use sinkpoint::testkit::{Counts, FaultStore};
use sinkpoint::{Attempt, CheckpointId, Committer, DirTable, Part, StagePart, Store};

use common::{Goal, Report, fmt_dur, job, small_result, target};

/// The latency of every request in the throttled rows: a cross-region object store.
const REQUEST_LATENCY: Duration = Duration::from_millis(20);

/// Requests as an S3 bill counts them: a listing is one request per page of 1,000 objects (`lists` counts the
/// listing calls, each at least one page; `listed / 1,000` adds the further pages, within one per call).
fn requests(c: Counts) -> u64 {
    c.puts + c.gets + c.lists + c.listed / 1000 + c.deletes + c.copies
}

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
    Store::builder(job(), target())
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

/// Requests (and listed objects) of one round adopting and committing 8 new checkpoints, once `history`
/// checkpoints are already committed.
fn round_after(rt: &tokio::runtime::Runtime, history: u64) -> (u64, u64, Duration) {
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
            let seals = (start..start + batch).map(|i| {
                let worker = &worker;
                async move {
                    worker
                        .stage_and_seal(&CheckpointId::for_key(&input(i)), vec![input(i)], vec![small_result(i)])
                        .await
                        .unwrap()
                }
            });
            futures::stream::iter(seals).buffer_unordered(32).collect::<Vec<()>>().await;
            inbox.adopt(&store).await.unwrap();
            Committer::new(&store, &table).commit_pending().await.unwrap();
        }
        for i in history..history + 8 {
            worker
                .stage_and_seal(&CheckpointId::for_key(&input(i)), vec![input(i)], vec![small_result(i)])
                .await
                .unwrap();
        }
        let before = objects.counts();
        let started = Instant::now();
        inbox.adopt(&store).await.unwrap();
        Committer::new(&store, &table).commit_pending().await.unwrap();
        let after = objects.counts();
        (requests(after) - requests(before), after.listed - before.listed, started.elapsed())
    })
}

use futures::StreamExt as _;

fn history_rows(rt: &tokio::runtime::Runtime, report: &Report, small: u64, large: u64) {
    let (r_small, l_small, t_small) = round_after(rt, small);
    let (r_large, l_large, t_large) = round_after(rt, large);
    let figures = format!(
        "after {small}: {r_small} requests, {l_small} objects listed, {}; after {large}: {r_large} requests, {l_large} listed, {}",
        fmt_dur(t_small),
        fmt_dur(t_large)
    );
    report.add(
        format!("committer requests per round, {large} vs {small} committed"),
        r_large as f64 / r_small as f64,
        Goal::AtMost(1.1),
        figures,
    );
}

fn main() {
    let quick = common::quick();
    let rt = common::runtime();
    let report = Report::default();
    worker_rows(&rt, &report, if quick { 3 } else { 50 });
    committer_rows(&rt, &report);
    let (small, large) = if quick { (100, 1_000) } else { (1_000, 100_000) };
    history_rows(&rt, &report, small, large);
    report.print("Shared staging: workers on many machines");
}
