//! The whole job shape of issue 15: N inputs of 1,000 rows, one data file each, one final table commit; plain
//! (no checkpoints) vs checkpointed through sinkpoint (`is_processed`, then `stage_and_seal` per input, then
//! `Committer::finish`), with 1 and 8 workers, the mirror on a local directory (synchronous or asynchronous) or
//! off, each worker's seals queued in a `SealWindow` (the recommended way) or each one awaited.
//!
//! Cost per input = (checkpointed − plain) / N. The two jobs run in pairs, one right after the other (which goes
//! first alternates), and the figure is the median over the pairs of each pair's difference: the disk's fsync
//! latency moves by 2× within minutes here, so a difference of medians taken apart would measure the disk. The
//! goal is 1/20 of Daft 0.7.26's 17.4 ms with one worker (0.87 ms) and 1/40 with 8 (0.45 ms).
//!
//! `cargo bench --bench job_shape` (N = 50 and 1,000, 5 pairs each; about 5 minutes); quick mode (`cargo test
//! --bench job_shape`): N = 20, one pair. `JOB_SHAPE_ONLY=<text>` runs only the rows whose name contains it
//! (for instance `JOB_SHAPE_ONLY="8 workers, mirror on a local dir, asynchronous, seals awaited"`).

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sinkpoint::mirror::{MirrorMode, MirrorSettings};
use sinkpoint::{
    Attempt, CheckpointId, CommitKey, Committer, DirTable, JobId, Part, SealWindow, SealWindowSettings, StagePart,
    Store, Target, TargetCommit,
};

use common::{Goal, Report, target};

const ROWS: usize = 1000;

fn rows(i: usize) -> Vec<u8> {
    (0..ROWS).map(|r| format!("{i}:{r}\n")).collect::<String>().into_bytes()
}

fn key(i: usize) -> Vec<u8> {
    format!("source://inputs/{i:05}.csv").into_bytes()
}

/// The plain job: every worker writes its inputs' data files; one table commit of all of them.
async fn plain(dir: &std::path::Path, n: usize, workers: usize) -> Duration {
    let table = DirTable::local(dir.join("table")).unwrap();
    let started = Instant::now();
    let tasks = (0..workers).map(|w| {
        let table = table.clone();
        tokio::spawn(async move {
            let mut results = Vec::new();
            for i in (w..n).step_by(workers) {
                results.push(table.write_data_file(&format!("in-{i:05}"), rows(i)).await.unwrap());
            }
            results
        })
    });
    let mut results = Vec::new();
    for task in futures::future::join_all(tasks).await {
        results.extend(task.unwrap());
    }
    let key = CommitKey { job: JobId::new("plain").unwrap(), n: 0 };
    let ids = vec![CheckpointId::new("all").unwrap()];
    let commit =
        TargetCommit { key: &key, ids: &ids, epoch: 1, results: &results, final_commit: true, prepared_version: None };
    assert!(matches!(table.commit(&commit).await, sinkpoint::CommitOutcome::Committed));
    started.elapsed()
}

/// Where the checkpointed job's store is mirrored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mirror {
    Synchronous,
    Asynchronous,
    Off,
}

impl Mirror {
    fn describe(self) -> &'static str {
        match self {
            Mirror::Synchronous => "mirror on a local dir, synchronous",
            Mirror::Asynchronous => "mirror on a local dir, asynchronous",
            Mirror::Off => "no mirror",
        }
    }
}

/// How each worker waits for its seals.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Seals {
    /// Queued in a `SealWindow` of the default depth, flushed when the worker is done.
    Windowed,
    /// Each `stage_and_seal` awaited before the next input.
    Awaited,
}

/// The same job checkpointed: each input skipped if processed, else written and staged-and-sealed; then finish.
async fn checkpointed(dir: &std::path::Path, n: usize, workers: usize, mirror: Mirror, seals: Seals) -> Duration {
    let table = DirTable::local(dir.join("table")).unwrap();
    let started = Instant::now();
    let mut builder = Store::builder(JobId::new("ckpt").unwrap(), target()).path(dir.join("sink.redb"));
    if mirror != Mirror::Off {
        std::fs::create_dir_all(dir.join("mirror")).unwrap();
        let fs = object_store::local::LocalFileSystem::new_with_prefix(dir.join("mirror")).unwrap().with_fsync(true);
        let mut settings = MirrorSettings::default();
        if mirror == Mirror::Asynchronous {
            settings.mode = MirrorMode::Asynchronous { lag_batches_max: 1024, lag_ms_max: 10_000 };
        }
        builder = builder.mirror(Arc::new(fs), object_store::path::Path::from("m"), settings);
    }
    let store = Arc::new(builder.open().await.unwrap());
    let tasks = (0..workers).map(|w| {
        let (table, store) = (table.clone(), store.clone());
        tokio::spawn(async move { worker(&store, &table, (w..n).step_by(workers), seals).await })
    });
    for task in futures::future::join_all(tasks).await {
        task.unwrap();
    }
    Committer::new(&store, &table).finish().await.unwrap();
    let elapsed = started.elapsed();
    Arc::try_unwrap(store).map(Store::close).unwrap_or_else(|_| panic!("the store is still shared"));
    elapsed
}

/// One worker of the checkpointed job: its inputs in turn, every seal acknowledged before it returns.
async fn worker(store: &Store, table: &DirTable, inputs: impl Iterator<Item = usize>, seals: Seals) {
    let mut window = SealWindow::new(store, SealWindowSettings::default()).unwrap();
    for i in inputs {
        if store.is_processed(&key(i)).unwrap() {
            continue;
        }
        let result = table.write_data_file(&format!("in-{i:05}"), rows(i)).await.unwrap();
        let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(i)]).results(vec![result]);
        let id = CheckpointId::new(format!("in-{i:05}")).unwrap();
        match seals {
            Seals::Windowed => window.stage_and_seal(&id, part, 1).await.unwrap(),
            Seals::Awaited => drop(store.stage_and_seal(&id, part, 1).await.unwrap()),
        }
    }
    window.flush().await.unwrap();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let quick = common::quick();
    let rt = common::runtime();
    let report = Report::default();
    let (sizes, pairs): (&[usize], usize) = if quick { (&[20], 1) } else { (&[50, 1000], 5) };
    let only = std::env::var("JOB_SHAPE_ONLY").unwrap_or_default();
    let shapes = [
        (Seals::Windowed, Mirror::Synchronous),
        (Seals::Windowed, Mirror::Asynchronous),
        (Seals::Windowed, Mirror::Off),
        (Seals::Awaited, Mirror::Asynchronous),
        (Seals::Awaited, Mirror::Off),
    ];
    for &n in sizes {
        for workers in [1usize, 8] {
            for (seals, mirror) in shapes {
                let name = format!(
                    "cost per input / goal, N = {n}, {workers} worker{}, {}, seals {}",
                    if workers == 1 { "" } else { "s" },
                    mirror.describe(),
                    if seals == Seals::Windowed { "in a window" } else { "awaited" },
                );
                if !name.contains(&only) {
                    continue;
                }
                let (mut costs, mut plain_t, mut ckpt_t) = (Vec::new(), Vec::new(), Vec::new());
                for pair in 0..pairs {
                    let (a, b) = (common::tempdir(), common::tempdir());
                    let (p, c) = if pair % 2 == 0 {
                        let p = rt.block_on(plain(a.path(), n, workers));
                        (p, rt.block_on(checkpointed(b.path(), n, workers, mirror, seals)))
                    } else {
                        let c = rt.block_on(checkpointed(b.path(), n, workers, mirror, seals));
                        (rt.block_on(plain(a.path(), n, workers)), c)
                    };
                    costs.push((c.as_secs_f64() - p.as_secs_f64()) * 1000.0 / n as f64);
                    plain_t.push(p.as_secs_f64() * 1000.0);
                    ckpt_t.push(c.as_secs_f64() * 1000.0);
                }
                let (lo, hi) = costs.iter().fold((f64::MAX, f64::MIN), |(l, h), &c| (l.min(c), h.max(c)));
                let per_input_ms = median(costs);
                let goal_ms = if workers == 1 { 0.87 } else { 0.45 };
                let figures = format!(
                    "{per_input_ms:.3} ms per input (pairs: {lo:.3}-{hi:.3}; plain {:.1} ms, checkpointed {:.1} ms, medians)",
                    median(plain_t),
                    median(ckpt_t)
                );
                report.add(name, per_input_ms / goal_ms, Goal::AtMost(1.0), figures);
            }
        }
    }
    report.print("The job shape: checkpoint cost per input");
}
