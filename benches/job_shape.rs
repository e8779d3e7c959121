//! The whole job shape of issue 15: N inputs of 1,000 rows, one data file each, one final table commit; plain
//! (no checkpoints) vs checkpointed through sinkpoint (`is_processed`, then `stage_and_seal` per input, then
//! `Committer::finish`), with 1 and 8 workers, the mirror on a local directory (synchronous or asynchronous) or
//! off. Cost per
//! input = (checkpointed − plain) / N, both measured in the same run; the goal is 1/20 of Daft 0.7.26's 17.4 ms
//! with one worker (0.87 ms) and 0.45 ms with 8.
//!
//! `cargo bench --bench job_shape` (N = 50 and 1,000, median of 3 runs); quick mode (`cargo test --bench
//! job_shape`): N = 20, one run.

#![allow(clippy::disallowed_methods, reason = "benches measure wall time; nothing they decide depends on it")]

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sinkpoint::mirror::{MirrorMode, MirrorSettings};
use sinkpoint::{
    Attempt, CheckpointId, CommitKey, Committer, DirTable, JobId, Part, StagePart, Store, Target, TargetCommit,
};

use common::{Goal, Report, fmt_dur, target};

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

/// The same job checkpointed: each input skipped if processed, else written and staged-and-sealed; then finish.
async fn checkpointed(dir: &std::path::Path, n: usize, workers: usize, mirror: Mirror) -> Duration {
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
        tokio::spawn(async move {
            for i in (w..n).step_by(workers) {
                if store.is_processed(&key(i)).unwrap() {
                    continue;
                }
                let result = table.write_data_file(&format!("in-{i:05}"), rows(i)).await.unwrap();
                let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key(i)]).results(vec![result]);
                store.stage_and_seal(&CheckpointId::new(format!("in-{i:05}")).unwrap(), part, 1).await.unwrap();
            }
        })
    });
    for task in futures::future::join_all(tasks).await {
        task.unwrap();
    }
    Committer::new(&store, &table).finish().await.unwrap();
    let elapsed = started.elapsed();
    Arc::try_unwrap(store).map(Store::close).unwrap_or_else(|_| panic!("the store is still shared"));
    elapsed
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let quick = common::quick();
    let rt = common::runtime();
    let report = Report::default();
    let (sizes, runs): (&[usize], usize) = if quick { (&[20], 1) } else { (&[50, 1000], 3) };
    for &n in sizes {
        for workers in [1usize, 8] {
            for mirror in [Mirror::Synchronous, Mirror::Asynchronous, Mirror::Off] {
                let mut plain_t = Vec::new();
                let mut ckpt_t = Vec::new();
                for _ in 0..runs {
                    let (a, b) = (common::tempdir(), common::tempdir());
                    plain_t.push(rt.block_on(plain(a.path(), n, workers)));
                    ckpt_t.push(rt.block_on(checkpointed(b.path(), n, workers, mirror)));
                }
                let (p, c) = (median(plain_t), median(ckpt_t));
                let per_input_ms = (c.as_secs_f64() - p.as_secs_f64()) * 1000.0 / n as f64;
                let goal_ms = if workers == 1 { 0.87 } else { 0.45 };
                let name = format!(
                    "cost per input / goal, N = {n}, {workers} worker{}, {}",
                    if workers == 1 { "" } else { "s" },
                    mirror.describe()
                );
                let figures =
                    format!("{per_input_ms:.3} ms per input (plain {}, checkpointed {})", fmt_dur(p), fmt_dur(c));
                report.add(name, per_input_ms / goal_ms, Goal::AtMost(1.0), figures);
            }
        }
    }
    report.print("The job shape: checkpoint cost per input");
}
