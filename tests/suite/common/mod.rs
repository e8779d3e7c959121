//! Shared helpers of the integration tests: a small Daft-like job over a `DirTable`, and table accounting.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::DirTable;
use sinkpoint::testkit::CrashBackend;
use sinkpoint::{Attempt, Part, StagePart};
use sinkpoint::{CheckpointId, JobId, Store, TargetIdentity};

pub const ROWS_PER_INPUT: usize = 3;

/// The checkout whose files the tests read (docs, sources, fixtures, the fuzz corpus). Cargo sets
/// `CARGO_MANIFEST_DIR` when it runs a test, and that is read first: a test binary cargo did not rebuild (its
/// sources unchanged, as in a fresh clone whose files got their mtimes back) would otherwise read the files of the
/// checkout it was built in, which may be gone or older. The value compiled in is the fallback, for a binary run by
/// hand.
pub fn checkout() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

/// A store of job `j` and target `t` at `dir/s.redb`, without a mirror: the plain store most suites start from.
pub async fn plain_store(dir: &tempfile::TempDir) -> Store {
    let builder = Store::builder(JobId::new("j").unwrap(), TargetIdentity::new("t").unwrap());
    builder.path(dir.path().join("s.redb")).open().await.unwrap()
}

pub fn job() -> JobId {
    JobId::new("job-1").unwrap()
}

pub fn table_identity() -> TargetIdentity {
    TargetIdentity::new("memory:///table").unwrap()
}

pub fn memory_table() -> DirTable {
    DirTable::new(Arc::new(InMemory::new()), Path::from("table"))
}

pub fn input_id(i: usize) -> CheckpointId {
    CheckpointId::new(format!("input-{i:04}")).unwrap()
}

pub fn input_key(i: usize) -> Vec<u8> {
    format!("s3://in/{i:04}.csv").into_bytes()
}

pub fn expected_rows(inputs: usize) -> Vec<String> {
    (0..inputs).flat_map(|i| (0..ROWS_PER_INPUT).map(move |r| format!("{i}:{r}"))).collect()
}

pub async fn open(backend: &CrashBackend) -> Store {
    Store::builder(job(), table_identity()).backend(backend.clone()).open().await.unwrap()
}

/// A worker: writes the input's data file, stages its key and result as part 0, seals. Skips processed inputs.
pub async fn process(store: &Store, table: &DirTable, i: usize) {
    if store.is_processed(&input_key(i)).unwrap() {
        return;
    }
    let id = input_id(i);
    let attempt = match store.get(&id).unwrap() {
        None => Attempt::FIRST,
        Some(info) if store.orphans().contains(&id) => {
            store.restart(&id).await.unwrap();
            info.attempt.next()
        }
        Some(info) => info.attempt,
    };
    let rows: String = (0..ROWS_PER_INPUT).map(|r| format!("{i}:{r}\n")).collect();
    let result = table.write_data_file(&format!("input-{i:04}-a{attempt}"), rows.into_bytes()).await.unwrap();
    store
        .stage(&id, StagePart::new(attempt, Part::FIRST).keys(vec![input_key(i)]).results(vec![result]))
        .await
        .unwrap();
    store.seal(&id, 1).await.unwrap();
}

/// The table's rows compared with what `inputs` inputs should have produced.
#[derive(Debug, PartialEq, Eq)]
pub struct Accounting {
    pub rows: usize,
    pub duplicates: usize,
    pub missing: usize,
}

pub async fn account(table: &DirTable, inputs: usize) -> Accounting {
    let rows = table.rows().await.unwrap();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        *counts.entry(row.clone()).or_default() += 1;
    }
    let duplicates = counts.values().map(|c| c.saturating_sub(1)).sum();
    let missing = expected_rows(inputs).iter().filter(|r| !counts.contains_key(*r)).count();
    Accounting { rows: rows.len(), duplicates, missing }
}

pub fn exactly_once(inputs: usize) -> Accounting {
    Accounting { rows: inputs * ROWS_PER_INPUT, duplicates: 0, missing: 0 }
}

/// The quick-start job's binary: integration tests run from target/<profile>/deps, and cargo builds the examples
/// next to it before the tests.
pub fn job_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let job = profile_dir.join("examples").join(format!("job{}", std::env::consts::EXE_SUFFIX));
    assert!(job.exists(), "the quick-start example is not built at {}", job.display());
    job
}

/// How a model test's job reacts to a failed call, as a real job would: the store refusing the call is its
/// answer (logged); damage or a bug fails the test; anything else (I/O, a crash point, fencing) ends the process,
/// and the job runs again. Returns whether the process ends.
pub fn process_ends_after(what: &str, e: &sinkpoint::Error, log: &mut Vec<String>) -> bool {
    use sinkpoint::ErrorKind;
    match e.kind() {
        ErrorKind::IllegalTransition | ErrorKind::InvalidInput | ErrorKind::Target | ErrorKind::CommitMismatch => {
            log.push(format!("{what} refused: {e}"));
            false
        }
        ErrorKind::Bug | ErrorKind::Corrupt | ErrorKind::WrongStore => panic!("{what}: {e}\n{}", log.join("\n")),
        _ => {
            log.push(format!("{what} failed: {e}; the process ends and the job runs again"));
            true
        }
    }
}

/// How many times [`retry_io`] calls again.
const IO_RETRIES_MAX: usize = 10;

/// `call`, called again while it fails `Io` (an unsettled create under stacked faults, in the model tests whose
/// calls are idempotent), at most [`IO_RETRIES_MAX`] more times; its last outcome.
pub async fn retry_io<F, Fut>(mut call: F) -> sinkpoint::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = sinkpoint::Result<()>>,
{
    let mut outcome = call().await;
    for _ in 0..IO_RETRIES_MAX {
        match &outcome {
            Err(e) if e.kind() == sinkpoint::ErrorKind::Io => outcome = call().await,
            _ => break,
        }
    }
    outcome
}

/// `sharded!(mod name => run)` declares a randomized suite as [`SHARDS`](sinkpoint::testkit::SHARDS) tests:
/// the module `name` with tests `shard_1_of_4` to `shard_4_of_4`, each calling `run(Shard)` (a function beside
/// the module) for its own range of the cases. libtest runs a binary's tests in parallel, so one long suite is
/// spread over every core; `cargo test --test suite <file>::name` runs them all.
macro_rules! sharded {
    ($(#[$meta:meta])* mod $name:ident => $run:ident) => {
        $(#[$meta])*
        mod $name {
            use sinkpoint::testkit::Shard;
            const _: () = assert!(sinkpoint::testkit::SHARDS == 4, "one test per shard below");

            #[test]
            fn shard_1_of_4() {
                super::$run(Shard::of(0));
            }

            #[test]
            fn shard_2_of_4() {
                super::$run(Shard::of(1));
            }

            #[test]
            fn shard_3_of_4() {
                super::$run(Shard::of(2));
            }

            #[test]
            fn shard_4_of_4() {
                super::$run(Shard::of(3));
            }
        }
    };
}
pub(crate) use sharded;
