//! A sinkpoint commit of k fragments against a plain Lance Append of the same kind of fragments, and the cost of
//! a probe as the table's history grows, on a local dataset. Each row's baseline is measured in the same run, in
//! alternating bursts, and the ratio is the median of the per-burst ratios.
//!
//! ```text
//! cargo bench -p sinkpoint-lance --bench commit     # the figures in docs/BENCHMARKS.md
//! cargo test -p sinkpoint-lance --bench commit      # quick mode: one burst each, tiny sizes (CI)
//! ```
#![expect(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{RecordBatch, RecordBatchIterator, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{CommitBuilder, WriteMode, WriteParams};
use sinkpoint::{CheckpointId, CommitKey, CommitOutcome, JobId, ProbeOutcome, Target, TargetCommit, WriteResult};
use sinkpoint_lance::{LanceTarget, decode_fragment, write_fragments};

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new("row", DataType::UInt64, false)]))
}

async fn create(uri: &str) -> Arc<Dataset> {
    let reader = RecordBatchIterator::new(Vec::<Result<RecordBatch, _>>::new(), schema());
    let params = WriteParams { mode: WriteMode::Create, ..WriteParams::default() };
    Arc::new(Dataset::write(reader, uri, Some(params)).await.unwrap_or_else(|e| panic!("create: {e}")))
}

/// `k` uncommitted one-row fragments.
async fn fragments(uri: &str, k: usize, first_row: u64) -> Vec<WriteResult> {
    let dataset = Arc::new(Dataset::open(uri).await.unwrap_or_else(|e| panic!("open: {e}")));
    let mut out = Vec::with_capacity(k);
    for i in 0..k as u64 {
        let batch = RecordBatch::try_new(schema(), vec![Arc::new(UInt64Array::from(vec![first_row + i]))])
            .unwrap_or_else(|e| panic!("batch: {e}"));
        out.extend(write_fragments(dataset.clone(), vec![batch]).await.unwrap_or_else(|e| panic!("write: {e}")));
    }
    out
}

async fn plain_append(uri: &str, results: &[WriteResult]) -> Duration {
    let fragments = results.iter().map(|r| decode_fragment(r).unwrap_or_else(|e| panic!("{e}"))).collect();
    let start = Instant::now();
    let dataset = Arc::new(Dataset::open(uri).await.unwrap_or_else(|e| panic!("open: {e}")));
    let transaction = TransactionBuilder::new(dataset.version().version, Operation::Append { fragments }).build();
    CommitBuilder::new(dataset).execute(transaction).await.unwrap_or_else(|e| panic!("append: {e}"));
    start.elapsed()
}

async fn sinkpoint_commit(target: &LanceTarget, n: u64, results: &[WriteResult]) -> Duration {
    let job = JobId::new("bench").unwrap_or_else(|e| panic!("{e}"));
    let key = CommitKey { job, n };
    let ids = vec![CheckpointId::new(format!("cp-{n:06}")).unwrap_or_else(|e| panic!("{e}"))];
    // The committer reads the version before it records the intent; that read is not part of the commit.
    let prepared_version = target.version().await.unwrap_or_else(|e| panic!("{e}"));
    let commit = TargetCommit { key: &key, ids: &ids, epoch: 1, results, final_commit: false, prepared_version };
    let start = Instant::now();
    let outcome = target.commit(&commit).await;
    assert_eq!(outcome, CommitOutcome::Committed);
    start.elapsed()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn commit_rows(full: bool) {
    let bursts = if full { 9 } else { 1 };
    let per_burst = if full { 5 } else { 1 };
    for k in if full { vec![1, 100] } else { vec![1, 3] } {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let uri = dir.path().join("bench.lance").to_string_lossy().into_owned();
        create(&uri).await;
        let target = LanceTarget::new(&uri).unwrap_or_else(|e| panic!("{e}"));
        let (mut ratios, mut ours_ms, mut plain_ms) = (Vec::new(), Vec::new(), Vec::new());
        let mut n = 0;
        for _ in 0..bursts {
            let (mut ours, mut plain) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..per_burst {
                let a = fragments(&uri, k, n * 1000).await;
                let b = fragments(&uri, k, n * 1000 + 500).await;
                plain += plain_append(&uri, &a).await;
                ours += sinkpoint_commit(&target, n, &b).await;
                n += 1;
            }
            ratios.push(ours.as_secs_f64() / plain.as_secs_f64());
            ours_ms.push(ours.as_secs_f64() * 1e3 / per_burst as f64);
            plain_ms.push(plain.as_secs_f64() * 1e3 / per_burst as f64);
        }
        println!(
            "commit of k = {k:>3} fragments: sinkpoint {:.2} ms, plain Append {:.2} ms, ratio {:.2}x (median of {bursts} bursts of {per_burst})",
            median(ours_ms),
            median(plain_ms),
            median(ratios)
        );
    }
}

/// A probe reads only the versions since its intent: its time follows those, not the table's history.
async fn probe_rows(full: bool) {
    let history = if full { vec![10, 200] } else { vec![2, 4] };
    for versions in history {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let uri = dir.path().join("probe.lance").to_string_lossy().into_owned();
        create(&uri).await;
        let target = LanceTarget::new(&uri).unwrap_or_else(|e| panic!("{e}"));
        for n in 0..versions {
            let results = fragments(&uri, 1, n).await;
            sinkpoint_commit(&target, n, &results).await;
        }
        let last = versions - 1;
        let key = CommitKey { job: JobId::new("bench").unwrap_or_else(|e| panic!("{e}")), n: last };
        // The intent of the last key was prepared one version before it landed: one version to read.
        let prepared = target.version().await.unwrap_or_else(|e| panic!("{e}")).map(|v| v - 1);
        let mut times = Vec::new();
        for _ in 0..if full { 21 } else { 1 } {
            let start = Instant::now();
            let probe = target.probe(&key, prepared).await;
            times.push(start.elapsed().as_secs_f64() * 1e3);
            assert!(matches!(probe, ProbeOutcome::Committed { .. }), "{probe:?}");
        }
        println!(
            "probe of the last key, 1 version since its intent, {versions:>4} versions of history: {:.2} ms",
            median(times)
        );
    }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; `cargo test --bench` does not: then one quick burst of each row.
    let full = std::env::args().any(|a| a == "--bench");
    commit_rows(full).await;
    probe_rows(full).await;
}
