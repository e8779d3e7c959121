//! A sinkpoint commit of k fragments against a plain Lance Append of the same kind of fragments, on a local
//! dataset; and the object-store requests of a probe and of a key check as the table's history grows, counted
//! through a wrapper on the dataset's object store, on a local dataset or on an S3-API server. Each commit row's
//! baseline is measured in the same run, in alternating bursts, and the ratio is the median of the per-burst
//! ratios.
//!
//! ```text
//! cargo test --workspace --bench commit -- --bench                   # the figures in docs/BENCHMARKS.md
//! cargo test --workspace --bench commit -- --bench --s3 --versions 10,1000
//!                                 # the history rows on S3 (SINKPOINT_S3_ENDPOINT: source .ci/moto.sh; moto_start)
//! cargo test --workspace --bench commit                              # quick mode: tiny sizes (CI)
//! ```
//!
//! Built with `--workspace` so that the features of Lance's dependencies unify as in every other build.
#![expect(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arrow_array::{RecordBatch, RecordBatchIterator, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use lance::Dataset;
use lance::dataset::transaction::{Operation, TransactionBuilder};
use lance::dataset::{CommitBuilder, WriteMode, WriteParams};
use lance_io::object_store::{ObjectStoreParams, StorageOptionsAccessor, WrappingObjectStore};
use object_store::ObjectStore;
use object_store::list::PaginatedListStore;
use sinkpoint::testkit::{Counts, FaultStore};
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
    fragments_in(dataset, k, first_row).await
}

/// `k` uncommitted one-row fragments of `dataset`.
async fn fragments_in(dataset: Arc<Dataset>, k: usize, first_row: u64) -> Vec<WriteResult> {
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

/// Counts the object-store requests of every store Lance opens through it: a [`FaultStore`] over each, summed.
#[derive(Debug, Default)]
struct Counting {
    stores: Mutex<Vec<FaultStore<Arc<dyn ObjectStore>>>>,
}

impl Counting {
    fn counts(&self) -> Counts {
        let stores = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        stores.iter().map(FaultStore::counts).fold(Counts::default(), |a, c| Counts {
            puts: a.puts + c.puts,
            gets: a.gets + c.gets,
            lists: a.lists + c.lists,
            listed: a.listed + c.listed,
            deletes: a.deletes + c.deletes,
            copies: a.copies + c.copies,
            bytes_put: a.bytes_put + c.bytes_put,
            bytes_got: a.bytes_got + c.bytes_got,
        })
    }
}

impl WrappingObjectStore for Counting {
    fn wrap(&self, _store_prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        let store = FaultStore::new(original);
        self.stores.lock().unwrap_or_else(PoisonError::into_inner).push(store.clone());
        Arc::new(store)
    }

    // Paged listings go through `wrap` too, so that no request escapes the count.
    fn wrap_paginated(
        &self,
        _store_prefix: &str,
        _original: Arc<dyn PaginatedListStore>,
    ) -> Option<Arc<dyn PaginatedListStore>> {
        None
    }
}

/// The requests of one operation: the counts after it minus the counts before.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Requests {
    gets: u64,
    puts: u64,
    lists: u64,
    listed: u64,
    renames: u64,
    deletes: u64,
    bytes_got: u64,
}

impl Requests {
    fn between(before: Counts, after: Counts) -> Self {
        Self {
            gets: after.gets - before.gets,
            puts: after.puts - before.puts,
            lists: after.lists - before.lists,
            listed: after.listed - before.listed,
            renames: after.copies - before.copies,
            deletes: after.deletes - before.deletes,
            bytes_got: after.bytes_got - before.bytes_got,
        }
    }

    fn total(self) -> u64 {
        self.gets + self.puts + self.lists + self.renames + self.deletes
    }
}

impl std::fmt::Display for Requests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>2} requests ({} get, {} put, {} list of {} objects, {} rename; {:.1} KiB read)",
            self.total(),
            self.gets,
            self.puts,
            self.lists,
            self.listed,
            self.renames,
            self.bytes_got as f64 / 1024.0
        )?;
        if self.deletes > 0 {
            write!(f, " {} delete", self.deletes)?;
        }
        Ok(())
    }
}

/// One operation's requests, repeated: the counts of the first repetition (and of the first that differs from
/// it, bytes aside: a commit grows the manifest the next one reads), and the median time.
struct Measured {
    requests: Vec<Requests>,
    ms: Vec<f64>,
}

impl Measured {
    fn new() -> Self {
        Self { requests: Vec::new(), ms: Vec::new() }
    }

    async fn run<F: std::future::Future<Output = ()>>(&mut self, counter: &Counting, operation: F) {
        let before = counter.counts();
        let start = Instant::now();
        operation.await;
        self.ms.push(start.elapsed().as_secs_f64() * 1e3);
        self.requests.push(Requests::between(before, counter.counts()));
    }

    fn line(&self) -> String {
        let first = self.requests[0];
        let varied = self.requests.iter().find(|r| Requests { bytes_got: first.bytes_got, ..**r } != first);
        let varied = varied.map(|r| format!(" (varied: also {r})")).unwrap_or_default();
        format!("{first}{varied}, {:.2} ms", median(self.ms.clone()))
    }
}

/// Where the history rows run: a local directory, or a bucket on an S3-API server.
struct Place {
    name: &'static str,
    uri: String,
    options: HashMap<String, String>,
    _dir: Option<tempfile::TempDir>,
}

impl Place {
    fn local(versions: u64) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // Lance reads a plain local path's files directly, past any wrapper; `file-object-store://` sends the
        // same reads to the same directory as object-store requests, which the wrapper counts.
        let path = dir.path().join(format!("history-{versions}.lance"));
        let uri = format!("file-object-store://{}", path.to_string_lossy());
        Self { name: "local (file-object-store://)", uri, options: HashMap::new(), _dir: Some(dir) }
    }

    fn s3(endpoint: &str, versions: u64) -> Self {
        let bucket = format!("sinkpoint-lance-bench-{}", std::process::id());
        sinkpoint::testkit::create_s3_bucket(endpoint, &bucket).unwrap_or_else(|e| panic!("{e}"));
        let options = [
            ("aws_endpoint", endpoint),
            ("allow_http", "true"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_region", "us-east-1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        Self { name: "S3 (moto)", uri: format!("s3://{bucket}/history-{versions}.lance"), options, _dir: None }
    }

    /// The empty dataset, without Lance's auto-cleanup (which would list every manifest each 20 commits of
    /// the history's build).
    async fn create(&self) {
        let params = ObjectStoreParams {
            storage_options_accessor: Some(Arc::new(StorageOptionsAccessor::with_static_options(self.options.clone()))),
            ..ObjectStoreParams::default()
        };
        let reader = RecordBatchIterator::new(Vec::<Result<RecordBatch, _>>::new(), schema());
        let params = WriteParams {
            mode: WriteMode::Create,
            store_params: Some(params),
            auto_cleanup: None,
            ..WriteParams::default()
        };
        Dataset::write(reader, self.uri.as_str(), Some(params)).await.unwrap_or_else(|e| panic!("create: {e}"));
    }
}

/// What the versions of a history are.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum History {
    /// Config changes, the cheapest commit Lance has: the manifest stays the size it was.
    Config,
    /// As `Config`, but every tenth version a one-row Append, so the manifest grows as an appended table's does.
    Appends,
}

/// Foreign commits until the dataset is at `version`.
async fn foreign_history(target: &LanceTarget, version: u64, history: History) {
    let mut dataset = target.open().await.unwrap_or_else(|e| panic!("open: {e}"));
    while dataset.version().version < version {
        let v = dataset.version().version;
        if history == History::Appends && v.is_multiple_of(10) {
            let shared = Arc::new(dataset);
            let results = fragments_in(shared.clone(), 1, 1_000_000 + v).await;
            let fragments = results.iter().map(|r| decode_fragment(r).unwrap_or_else(|e| panic!("{e}"))).collect();
            let transaction = TransactionBuilder::new(v, Operation::Append { fragments }).build();
            dataset = CommitBuilder::new(shared).execute(transaction).await.unwrap_or_else(|e| panic!("append: {e}"));
        } else {
            dataset
                .update_config([("bench.foreign".to_owned(), v.to_string())])
                .await
                .unwrap_or_else(|e| panic!("config: {e}"));
        }
    }
}

/// A probe and a key check read the job's mark in the latest manifest (and at most the landed key's
/// transaction): their requests do not follow the table's history. The table is at `versions` versions with
/// the job's key 0 landed last; counted: the open's probe of key 1 (not begun), the probe of key 0 (landed,
/// its intent one version before), and the commit of key 1.
async fn history_rows(full: bool, versions_list: &[u64], histories: &[History], endpoint: Option<&str>) {
    for (&versions, &history) in versions_list.iter().flat_map(|v| histories.iter().map(move |h| (v, h))) {
        let place = match endpoint {
            Some(endpoint) => Place::s3(endpoint, versions),
            None => Place::local(versions),
        };
        let built = Instant::now();
        place.create().await;
        let target =
            LanceTarget::new(&place.uri).unwrap_or_else(|e| panic!("{e}")).with_storage_options(place.options.clone());
        foreign_history(&target, versions - 1, history).await;
        let dataset = Arc::new(target.open().await.unwrap_or_else(|e| panic!("open: {e}")));
        let results = fragments_in(dataset.clone(), 1, 0).await;
        sinkpoint_commit(&target, 0, &results).await;
        let landed = target.version().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(landed, Some(versions));
        let built_s = built.elapsed().as_secs_f64();
        let latest = target.open().await.unwrap_or_else(|e| panic!("open: {e}"));
        let shape = format!(
            "{} fragments, a manifest of {:.1} KiB",
            latest.count_fragments(),
            latest.manifest_location().size.unwrap_or_default() as f64 / 1024.0
        );

        let counter = Arc::new(Counting::default());
        let counted = target.clone().with_object_store_wrapper(counter.clone());
        let job = JobId::new("bench").unwrap_or_else(|e| panic!("{e}"));
        let repeats = if full { 11 } else { 1 };
        let (mut not_begun, mut landed_probe, mut commit) = (Measured::new(), Measured::new(), Measured::new());
        for _ in 0..repeats {
            let key = CommitKey { job: job.clone(), n: 1 };
            not_begun
                .run(&counter, async {
                    let probe = counted.probe(&key, None).await;
                    assert!(matches!(probe, ProbeOutcome::NotCommitted), "{probe:?}");
                })
                .await;
            let key = CommitKey { job: job.clone(), n: 0 };
            landed_probe
                .run(&counter, async {
                    let probe = counted.probe(&key, Some(versions - 1)).await;
                    assert!(matches!(probe, ProbeOutcome::Committed { ids: Some(_) }), "{probe:?}");
                })
                .await;
        }
        // Each commit lands a key, so the later ones find a table a few versions longer: as good as the same.
        for n in 1..=if full { 5 } else { 1 } {
            let results = fragments_in(dataset.clone(), 1, n).await;
            let prepared_version = counted.version().await.unwrap_or_else(|e| panic!("{e}"));
            let ids = vec![CheckpointId::new(format!("cp-{n:06}")).unwrap_or_else(|e| panic!("{e}"))];
            let key = CommitKey { job: job.clone(), n };
            let one = TargetCommit {
                key: &key,
                ids: &ids,
                epoch: 1,
                results: &results,
                final_commit: false,
                prepared_version,
            };
            commit
                .run(&counter, async {
                    assert_eq!(counted.commit(&one).await, CommitOutcome::Committed);
                })
                .await;
        }
        println!(
            "{} table of {versions} versions, {history:?} history ({shape}; built in {built_s:.1} s):",
            place.name
        );
        println!("  open's probe of a key not begun: {}", not_begun.line());
        println!("  probe of the landed key:         {}", landed_probe.line());
        println!("  commit of the next key:          {}", commit.line());
    }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; `cargo test --bench` does not: then one quick burst of each row.
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let versions: Vec<u64> = match args.iter().position(|a| a == "--versions") {
        Some(i) => args
            .get(i + 1)
            .map(|list| {
                list.split(',').map(|v| v.parse().unwrap_or_else(|e| panic!("--versions {list}: {e}"))).collect()
            })
            .unwrap_or_else(|| panic!("--versions takes a list such as 10,1000")),
        None if full => vec![10, 1_000, 10_000],
        None => vec![2, 12],
    };
    assert!(versions.iter().all(|&v| v >= 2), "a history has at least 2 versions (the create, the job's key 0)");
    let histories: Vec<History> = match args.iter().position(|a| a == "--history") {
        Some(i) => match args.get(i + 1).map(String::as_str) {
            Some("config") => vec![History::Config],
            Some("appends") => vec![History::Appends],
            _ => panic!("--history takes config or appends"),
        },
        None => vec![History::Config, History::Appends],
    };
    if args.iter().any(|a| a == "--s3") {
        let endpoint = std::env::var("SINKPOINT_S3_ENDPOINT")
            .unwrap_or_else(|_| panic!("--s3 needs SINKPOINT_S3_ENDPOINT (source .ci/moto.sh; moto_start)"));
        history_rows(full, &versions, &histories, Some(&endpoint)).await;
        return;
    }
    commit_rows(full).await;
    history_rows(full, &versions, &histories, None).await;
}
