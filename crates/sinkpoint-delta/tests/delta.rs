//! The Delta target's tests, in one binary (each test binary links all of delta-rs): the conformance suite,
//! racing writers, faults at the log store, each named crash point, the probe through checkpoints and log
//! cleanup, the key check's decisions, the write results' encoding, the data-file collector, and one checkpoint
//! across two Delta tables.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType as ArrowType, Field, Schema};
use async_trait::async_trait;
use deltalake::kernel::transaction::TransactionError;
use deltalake::kernel::{DataType, StructField, Version};
use deltalake::logstore::object_store::{ObjectStore, ObjectStoreExt as _};
use deltalake::logstore::{CommitOrBytes, LogStore, LogStoreConfig, LogStoreRef};
use deltalake::{DeltaResult, DeltaTable};
use futures::TryStreamExt as _;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use sinkpoint::testkit::conformance::{Inspect, SuiteSettings, run_conformance};
use sinkpoint::{
    Attempt, CheckpointId, CommitKey, CommitOutcome, JobId, Part, ProbeOutcome, StagePart, Target, TargetCommit,
    WriteResult,
};
use sinkpoint_delta::{DeltaTarget, write_data_file};
use tokio::sync::OnceCell;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new("row", ArrowType::Int64, false)]))
}

fn batch(rows: &[i64]) -> RecordBatch {
    RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(rows.to_vec()))])
        .unwrap_or_else(|e| panic!("a batch: {e}"))
}

fn id(name: &str) -> CheckpointId {
    CheckpointId::new(name).unwrap_or_else(|e| panic!("{e}"))
}

fn job(name: &str) -> JobId {
    JobId::new(name).unwrap_or_else(|e| panic!("{e}"))
}

/// An empty unpartitioned table with one non-null `row` column (a Delta long) at `uri`, a local directory.
async fn create_table(uri: &str) -> DeltaTable {
    std::fs::create_dir_all(uri).unwrap_or_else(|e| panic!("mkdir {uri}: {e}"));
    let url = deltalake::ensure_table_uri(uri).unwrap_or_else(|e| panic!("url of {uri}: {e}"));
    let table = DeltaTable::try_from_url(url).await.unwrap_or_else(|e| panic!("open {uri}: {e}"));
    table
        .create()
        .with_columns([StructField::new("row", DataType::LONG, false)])
        .await
        .unwrap_or_else(|e| panic!("create {uri}: {e}"))
}

/// Every row the table's active files hold, once per time it landed.
async fn rows_in(target: &DeltaTarget) -> DeltaResult<Vec<i64>> {
    let table = target.open().await?;
    let store = target.object_store()?;
    let paths: Vec<String> = table
        .snapshot()?
        .snapshot()
        .file_views(table.log_store().as_ref(), None)
        .map_ok(|f| f.path().into_owned())
        .try_collect()
        .await?;
    let mut rows = Vec::new();
    for path in paths {
        let bytes = store.get(&deltalake::Path::from(path.as_str())).await?.bytes().await?;
        for batch in ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()? {
            let batch = batch?;
            let column = batch.column(0).as_any().downcast_ref::<Int64Array>().map(|a| a.values().to_vec());
            rows.extend(column.unwrap_or_default());
        }
    }
    rows.sort_unstable();
    Ok(rows)
}

async fn sorted_rows(target: &DeltaTarget) -> Vec<i64> {
    rows_in(target).await.unwrap_or_else(|e| panic!("reading {}: {e}", target.uri()))
}

async fn write(target: &DeltaTarget, rows: &[i64]) -> WriteResult {
    let store = target.object_store().unwrap_or_else(|e| panic!("{e}"));
    write_data_file(store, &[batch(rows)]).await.unwrap_or_else(|e| panic!("write: {e}"))
}

/// A fresh table in a temporary directory, and the target over it.
async fn fresh(name: &str) -> (tempfile::TempDir, DeltaTarget) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let uri = dir.path().join(name).to_string_lossy().into_owned();
    create_table(&uri).await;
    (dir, DeltaTarget::new(uri))
}

/// The conformance suite's adapter: each batch of rows the suite names is written as a Parquet data file (what
/// a worker does) and committed through the real [`DeltaTarget`], fenced or not.
struct SuiteTable {
    _dir: tempfile::TempDir,
    uri: String,
    target: DeltaTarget,
    created: OnceCell<()>,
}

impl SuiteTable {
    fn new(fenced: bool) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("table").to_string_lossy().into_owned();
        let target = if fenced { DeltaTarget::new(&uri) } else { DeltaTarget::new(&uri).unfenced() };
        Self { _dir: dir, uri, target, created: OnceCell::new() }
    }

    /// The table, created empty on first use (the suite makes a fresh table per case).
    async fn table(&self) {
        self.created.get_or_init(|| async { drop(create_table(&self.uri).await) }).await;
    }
}

#[async_trait]
impl Target for SuiteTable {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        self.table().await;
        self.target.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        self.table().await;
        self.target.commit(commit).await
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        self.table().await;
        self.target.probe(key, prepared_version).await
    }
}

#[async_trait]
impl Inspect for SuiteTable {
    async fn write_rows(&self, _checkpoint: &CheckpointId, rows: &[u64]) -> sinkpoint::Result<WriteResult> {
        self.table().await;
        let rows = rows.iter().map(|&r| i64::try_from(r)).collect::<Result<Vec<_>, _>>();
        let rows = rows.map_err(|_| sinkpoint::Error::invalid_input("a row id above i64::MAX"))?;
        let store = self.target.object_store().map_err(|e| sinkpoint::Error::target_with_source("the store", e))?;
        write_data_file(store, &[batch(&rows)]).await
    }

    async fn landed_rows(&self) -> sinkpoint::Result<Vec<u64>> {
        self.table().await;
        let rows = rows_in(&self.target).await.map_err(|e| sinkpoint::Error::target_with_source("reading", e))?;
        rows.into_iter()
            .map(|r| u64::try_from(r).map_err(|_| sinkpoint::Error::corrupt(format!("a negative row id {r}"))))
            .collect()
    }
}

mod conformance {
    use sinkpoint::testkit::conformance::TargetFaults;

    use super::*;

    fn settings() -> SuiteSettings {
        let cases = u32::try_from(sinkpoint::testkit::cases(60)).unwrap_or(u32::MAX);
        let settings = SuiteSettings { cases, steps_max: 10, ..SuiteSettings::default() };
        println!("conformance: {cases} cases (SINKPOINT_CASES to change), seed {:#x}", settings.seed);
        settings
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_conformance_suite_passes_on_a_local_delta_table() {
        let report = run_conformance(|| SuiteTable::new(true), &settings()).await.unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(
            report.scenarios, 8,
            "the writer scenarios ran (race, zombie, late zombie, two drivers; 0 and 1 keys before): {report:?}"
        );
        println!("{report:?}");
    }

    /// delta-rs's own idempotent-write support (a `txn` with its conflict check and retries, no key check) is
    /// what the suite exists to refuse: a re-send built on a fresh snapshot appends again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plain_delta_rs_commit_with_a_txn_fails_the_conformance_suite() {
        let settings = SuiteSettings { faults: TargetFaults::Own, ..settings() };
        let failure = run_conformance(|| SuiteTable::new(false), &settings).await.err();
        let failure = failure.unwrap_or_else(|| panic!("an unfenced Delta target passed the suite"));
        println!("{failure}");
    }
}

/// Commits `results` under key `n` of job `job` by epoch `epoch`.
async fn commit_key(target: &DeltaTarget, job: &JobId, n: u64, epoch: u64, results: &[WriteResult]) -> CommitOutcome {
    let prepared_version = target.version().await.unwrap_or_else(|e| panic!("{e}"));
    let key = CommitKey { job: job.clone(), n };
    let ids = vec![id(&format!("cp-{n}-{epoch}"))];
    let commit = TargetCommit { key: &key, ids: &ids, epoch, results, final_commit: false, prepared_version };
    target.commit(&commit).await
}

mod racing {
    use super::*;

    const ROUNDS: u64 = 10;

    /// Two drivers of one job, each with its own data file, commit the same key at once each round: exactly one
    /// lands, the other is refused, and the table holds one of the two rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_writers_of_one_key_land_exactly_once_each_round() {
        let (_dir, target) = fresh("race").await;
        let other = target.clone();
        let race = job("race");
        for n in 0..ROUNDS {
            let row = i64::try_from(n).unwrap_or_else(|e| panic!("{e}")) * 10;
            let (a, b) = (write(&target, &[row]).await, write(&other, &[row + 1]).await);
            let (first, second) = tokio::join!(
                commit_key(&target, &race, n, 1, std::slice::from_ref(&a)),
                commit_key(&other, &race, n, 2, std::slice::from_ref(&b))
            );
            println!("round {n}: {first:?} / {second:?}");
            let landed = [&first, &second].iter().filter(|o| ***o == CommitOutcome::Committed).count();
            assert_eq!(landed, 1, "round {n}: {first:?} / {second:?}");
            let rows = sorted_rows(&target).await;
            let here = rows.iter().filter(|r| **r == row || **r == row + 1).count();
            assert_eq!(here, 1, "round {n}: {rows:?}");
        }
    }

    /// A second commit of a landed key with other data files (a zombie's, or a re-sent key whose checkpoints
    /// were written again): delta-rs's `txn` alone (its conflict check looks only at commits after the snapshot a
    /// commit is built on) lands it too; the fence refuses it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_second_commit_of_a_key_lands_once_fenced_and_twice_with_a_plain_txn() {
        for fenced in [true, false] {
            let (_dir, target) = fresh("late").await;
            let target = if fenced { target } else { target.unfenced() };
            let (first, late) = (vec![write(&target, &[7]).await], vec![write(&target, &[8]).await]);
            assert_eq!(commit_key(&target, &job("late"), 0, 2, &first).await, CommitOutcome::Committed);
            let again = commit_key(&target, &job("late"), 0, 1, &late).await;
            println!("fenced {fenced}: the late commit {again:?}");
            let expected: &[i64] = if fenced { &[7] } else { &[7, 8] };
            assert_eq!(sorted_rows(&target).await, expected, "fenced {fenced}");
        }
    }

    /// A re-send of the very same commit after its answer was lost: the fence finds it landed (same epoch,
    /// checkpoints and files, in the key's commit file since the intent) and writes nothing; a plain `txn` commit
    /// writes a second commit of the key (log replay keeps one `add` per path, so the rows do not double here, but
    /// the key landed twice). The same files under another epoch are another writer's send: refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resent_commit_is_known_as_landed_and_writes_no_second_version_fenced() {
        for fenced in [true, false] {
            let (_dir, target) = fresh("resend").await;
            let target = if fenced { target } else { target.unfenced() };
            let results = vec![write(&target, &[7]).await];
            let key = CommitKey { job: job("resend"), n: 0 };
            let ids = vec![id("cp-0")];
            let prepared_version = target.version().await.unwrap_or_else(|e| panic!("{e}"));
            let commit = TargetCommit {
                key: &key,
                ids: &ids,
                epoch: 1,
                results: &results,
                final_commit: false,
                prepared_version,
            };
            assert_eq!(target.commit(&commit).await, CommitOutcome::Committed);
            let before = target.version().await.unwrap_or_else(|e| panic!("{e}"));
            let again = target.commit(&commit).await;
            let after = target.version().await.unwrap_or_else(|e| panic!("{e}"));
            println!("fenced {fenced}: the re-send {again:?}, version {before:?} -> {after:?}");
            assert_eq!(again, CommitOutcome::Committed, "fenced {fenced}");
            assert_eq!(before == after, fenced, "fenced {fenced}: {before:?} -> {after:?}");
            if fenced {
                let other = target.commit(&TargetCommit { epoch: 2, ..commit.clone() }).await;
                assert!(matches!(other, CommitOutcome::NotLanded { .. }), "another epoch's send: {other:?}");
            }
            assert_eq!(sorted_rows(&target).await, [7]);
        }
    }

    /// Two jobs on one table have their own app ids: neither fences the other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_jobs_on_one_table_do_not_fence_each_other() {
        let (_dir, target) = fresh("two-jobs").await;
        for n in 0u32..3 {
            for (name, base) in [("job-a", 100), ("job-b", 200)] {
                let results = vec![write(&target, &[base + i64::from(n)]).await];
                let outcome = commit_key(&target, &job(name), u64::from(n), 1, &results).await;
                assert_eq!(outcome, CommitOutcome::Committed, "{name} key {n}");
            }
        }
        assert_eq!(sorted_rows(&target).await, [100, 101, 102, 200, 201, 202]);
    }
}

/// A log store beneath the fence with one armed fault, which fires once.
#[derive(Debug)]
struct FaultyLogStore {
    inner: LogStoreRef,
    armed: Arc<AtomicU8>,
    writes: Arc<AtomicU32>,
}

const PASS: u8 = 0;
/// F1: the commit is written, then the answer is lost.
const LAND_THEN_LOSE_ACK: u8 = 1;
/// F2 (as far as the committer can tell, U): the write fails and nothing is written.
const FAIL_WITHOUT_LANDING: u8 = 2;
/// A foreign writer takes the version first (once).
const FOREIGN_FIRST: u8 = 3;
/// A foreign writer takes the version first, every time.
const ALWAYS_TAKEN: u8 = 4;
/// The commit is written, and the answer says the version was taken (a storage client's retry met its own write).
const LAND_THEN_REPORT_TAKEN: u8 = 5;
/// A foreign writer's commit lands before delta-rs looks for the latest version, so it never writes ours.
const FOREIGN_BEFORE_LOOKING: u8 = 6;

/// A foreign writer's commit: only a `commitInfo`.
fn foreign_commit() -> CommitOrBytes {
    CommitOrBytes::LogBytes(bytes::Bytes::from(r#"{"commitInfo":{"timestamp":1,"operation":"FOREIGN"}}"#))
}

fn no_answer() -> TransactionError {
    TransactionError::LogStoreError { msg: "no answer".into(), source: Box::new(std::io::Error::other("timeout")) }
}

#[async_trait]
impl LogStore for FaultyLogStore {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn read_commit_entry(&self, version: Version) -> DeltaResult<Option<bytes::Bytes>> {
        self.inner.read_commit_entry(version).await
    }

    async fn write_commit_entry(
        &self,
        version: Version,
        commit: CommitOrBytes,
        operation_id: uuid::Uuid,
    ) -> Result<(), TransactionError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        let fault = self.armed.load(Ordering::SeqCst);
        if fault != ALWAYS_TAKEN {
            self.armed.store(PASS, Ordering::SeqCst);
        }
        match fault {
            LAND_THEN_LOSE_ACK => {
                self.inner.write_commit_entry(version, commit, operation_id).await?;
                Err(no_answer())
            }
            FAIL_WITHOUT_LANDING => Err(no_answer()),
            LAND_THEN_REPORT_TAKEN => {
                self.inner.write_commit_entry(version, commit, operation_id).await?;
                Err(TransactionError::VersionAlreadyExists(version))
            }
            FOREIGN_FIRST => {
                self.inner.write_commit_entry(version, foreign_commit(), operation_id).await?;
                self.inner.write_commit_entry(version, commit, operation_id).await
            }
            ALWAYS_TAKEN => Err(TransactionError::VersionAlreadyExists(version)),
            _ => self.inner.write_commit_entry(version, commit, operation_id).await,
        }
    }

    async fn abort_commit_entry(
        &self,
        version: Version,
        commit: CommitOrBytes,
        operation_id: uuid::Uuid,
    ) -> Result<(), TransactionError> {
        self.inner.abort_commit_entry(version, commit, operation_id).await
    }

    async fn get_latest_version(&self, start_version: Version) -> DeltaResult<Version> {
        if self.armed.compare_exchange(FOREIGN_BEFORE_LOOKING, PASS, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            let latest = self.inner.get_latest_version(start_version).await?;
            let written = self.inner.write_commit_entry(latest + 1, foreign_commit(), uuid::Uuid::new_v4()).await;
            written.map_err(|e| deltalake::DeltaTableError::Generic(format!("the foreign commit: {e}")))?;
        }
        self.inner.get_latest_version(start_version).await
    }

    fn object_store(&self, operation_id: Option<uuid::Uuid>) -> Arc<dyn ObjectStore> {
        self.inner.object_store(operation_id)
    }

    fn root_object_store(&self, operation_id: Option<uuid::Uuid>) -> Arc<dyn ObjectStore> {
        self.inner.root_object_store(operation_id)
    }

    fn config(&self) -> &LogStoreConfig {
        self.inner.config()
    }
}

/// The target over `target`'s table with a [`FaultyLogStore`] beneath its fence; the fault is armed through
/// the returned cell, and the writes it saw are counted.
fn faulty(target: &DeltaTarget) -> (DeltaTarget, Arc<AtomicU8>, Arc<AtomicU32>) {
    let (armed, writes) = (Arc::new(AtomicU8::new(PASS)), Arc::new(AtomicU32::new(0)));
    let (a, w) = (armed.clone(), writes.clone());
    let wrapped = target.clone().with_log_store_wrapper(Arc::new(move |inner| {
        Arc::new(FaultyLogStore { inner, armed: a.clone(), writes: w.clone() }) as LogStoreRef
    }));
    (wrapped, armed, writes)
}

mod faults {
    use sinkpoint::testkit::CrashBackend;
    use sinkpoint::{Committer, Store, TargetIdentity};

    use super::*;

    /// Stages and seals rows 0..3, one input each; `fault` hits the first commit (of inputs 0 and 1), whatever
    /// the committer makes of it; then recovers and finishes with nothing left pending.
    async fn job_with_fault(fault: u8) -> Vec<i64> {
        let (_dir, plain) = fresh("faults").await;
        let (target, armed, _) = faulty(&plain);
        let identity = TargetIdentity::new(target.uri()).unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job("faults"), identity)
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));
        for i in 0..3 {
            let results = vec![write(&target, &[i]).await];
            let key = format!("row-{i}").into_bytes();
            let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![key]).results(results);
            store.stage(&id(&format!("input-{i}")), part).await.unwrap_or_else(|e| panic!("stage: {e}"));
            store.seal(&id(&format!("input-{i}")), 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
            if i == 1 {
                armed.store(fault, Ordering::SeqCst);
                println!("first commit: {:?}", Committer::new(&store, &target).commit_pending().await);
            }
        }
        Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        Committer::new(&store, &target).finish().await.unwrap_or_else(|e| panic!("final commit: {e}"));
        assert!(store.pending().unwrap_or_else(|e| panic!("{e}")).checkpoints.is_empty());
        sorted_rows(&target).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn f1_landed_then_lost_ack_commits_every_row_once() {
        assert_eq!(job_with_fault(LAND_THEN_LOSE_ACK).await, [0, 1, 2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn f2_failed_without_landing_commits_every_row_once() {
        assert_eq!(job_with_fault(FAIL_WITHOUT_LANDING).await, [0, 1, 2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_landed_write_reported_as_taken_commits_every_row_once() {
        assert_eq!(job_with_fault(LAND_THEN_REPORT_TAKEN).await, [0, 1, 2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_foreign_commit_taking_the_next_version_is_retried_over() {
        assert_eq!(job_with_fault(FOREIGN_FIRST).await, [0, 1, 2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_foreign_commit_landing_before_delta_rs_looks_is_retried_over() {
        assert_eq!(job_with_fault(FOREIGN_BEFORE_LOOKING).await, [0, 1, 2]);
    }

    /// The outcome a commit answers for each fault, as the committer sees it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_fault_is_answered_by_how_far_the_write_got() {
        for (fault, expected) in [
            (LAND_THEN_LOSE_ACK, "Unknown"),
            (FAIL_WITHOUT_LANDING, "Unknown"),
            (FOREIGN_FIRST, "Committed"),
            (LAND_THEN_REPORT_TAKEN, "Committed"),
            (FOREIGN_BEFORE_LOOKING, "Committed"),
        ] {
            let (_dir, plain) = fresh("outcomes").await;
            let (target, armed, _) = faulty(&plain);
            let results = vec![write(&target, &[1]).await];
            armed.store(fault, Ordering::SeqCst);
            let outcome = commit_key(&target, &job("outcomes"), 0, 1, &results).await;
            assert!(format!("{outcome:?}").starts_with(expected), "fault {fault}: {outcome:?}");
            let probe = target.probe(&CommitKey { job: job("outcomes"), n: 0 }, None).await;
            let landed = fault != FAIL_WITHOUT_LANDING;
            assert_eq!(probe == (ProbeOutcome::Committed { ids: None }), landed, "fault {fault}: {probe:?}");
        }
    }

    /// A write reported taken is looked for where it was sent, not only since the intent: without an intent's
    /// version to search from, the commit still knows its own landed write.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_landed_write_reported_as_taken_is_found_where_it_was_sent() {
        let (_dir, plain) = fresh("taken-here").await;
        let (target, armed, _) = faulty(&plain);
        let results = vec![write(&target, &[1]).await];
        let key = CommitKey { job: job("taken-here"), n: 0 };
        let ids = vec![id("cp-0")];
        let commit = TargetCommit {
            key: &key,
            ids: &ids,
            epoch: 1,
            results: &results,
            final_commit: false,
            prepared_version: None,
        };
        armed.store(LAND_THEN_REPORT_TAKEN, Ordering::SeqCst);
        assert_eq!(target.commit(&commit).await, CommitOutcome::Committed);
        assert_eq!(sorted_rows(&target).await, [1]);
    }

    /// Foreign commits that take the next version every time: the commit re-reads and tries again a bounded
    /// number of times, then answers NotLanded (nothing of ours was written).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_next_version_taken_every_time_ends_not_landed_after_the_retry_limit() {
        let (_dir, plain) = fresh("taken").await;
        let (target, armed, writes) = faulty(&plain);
        let results = vec![write(&target, &[1]).await];
        armed.store(ALWAYS_TAKEN, Ordering::SeqCst);
        let outcome = commit_key(&target, &job("taken"), 0, 1, &results).await;
        assert!(matches!(&outcome, CommitOutcome::NotLanded { reason } if reason.contains("in a row")), "{outcome:?}");
        assert_eq!(writes.load(Ordering::SeqCst), sinkpoint_delta::limits::FOREIGN_COMMIT_RETRIES_MAX + 1);
        assert!(sorted_rows(&plain).await.is_empty());
    }
}

/// Each named crash point of the committer, on a job whose store lives in a file: the process dies there, a new
/// process opens the store, recovers and finishes, and every row is in the table once.
mod crash_points {
    use sinkpoint::commit::{CrashHook, crash_points};
    use sinkpoint::{Committer, Store, TargetIdentity};

    use super::*;

    async fn open_store(dir: &std::path::Path, target: &DeltaTarget) -> Store {
        let identity = TargetIdentity::new(target.uri()).unwrap_or_else(|e| panic!("{e}"));
        Store::builder(job("crash"), identity)
            .path(dir.join("sink.redb"))
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"))
    }

    async fn seal(store: &Store, target: &DeltaTarget, i: i64) {
        let name = format!("input-{i}");
        let results = vec![write(target, &[i]).await];
        let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![name.clone().into_bytes()]).results(results);
        store.stage(&id(&name), part).await.unwrap_or_else(|e| panic!("stage: {e}"));
        store.seal(&id(&name), 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crash_at_each_named_point_then_a_rerun_lands_every_row_once() {
        for point in crash_points::ALL {
            let (dir, target) = fresh("crash").await;
            // The unknown-outcome point is reached only when the answer is lost: the commit lands, the ack is not.
            let (sender, armed, _) = faulty(&target);
            {
                let store = open_store(dir.path(), &target).await;
                seal(&store, &target, 0).await;
                Committer::new(&store, &target).commit_pending().await.unwrap_or_else(|e| panic!("key 0: {e}"));
                seal(&store, &target, 1).await;
                armed.store(LAND_THEN_LOSE_ACK, Ordering::SeqCst);
                let sending = if point == crash_points::AFTER_MARK_UNKNOWN { &sender } else { &target };
                let hook: CrashHook = Arc::new(move |at| at == point);
                let crashed = Committer::new(&store, sending).with_crash_hook(hook).commit_pending().await;
                assert!(crashed.is_err(), "{point}: stopped there: {crashed:?}");
                store.close_async().await;
            }
            let store = open_store(dir.path(), &target).await;
            seal(&store, &target, 2).await;
            let report = Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
            println!("{point}: {report:?}");
            Committer::new(&store, &target).finish().await.unwrap_or_else(|e| panic!("{point}: finish: {e}"));
            assert_eq!(sorted_rows(&target).await, [0, 1, 2], "{point}");
        }
    }
}

/// The probe reads the job's `txn` in the latest snapshot: exact after checkpoints and log cleanup removed every
/// commit file the txns were written in, and a key above the largest Delta txn version is refused.
mod probe {
    use deltalake::Path;
    use deltalake::checkpoints::{cleanup_expired_logs_for, create_checkpoint};
    use deltalake::logstore::object_store::local::LocalFileSystem;
    use deltalake::logstore::object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, PutMultipartOptions, PutOptions,
        PutPayload, PutResult, Result as OsResult,
    };
    use futures::stream::BoxStream;
    use sinkpoint_delta::fence::{KeyCheck, app_id, key_check, probe_landed};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_probe_is_exact_after_a_checkpoint_and_log_cleanup() {
        let (_dir, target) = fresh("cleaned").await;
        let ours = job("cleaned");
        for n in 0u32..3 {
            let results = vec![write(&target, &[i64::from(n)]).await];
            assert_eq!(commit_key(&target, &ours, u64::from(n), 1, &results).await, CommitOutcome::Committed);
        }
        // A foreign job's commit after ours, then a checkpoint and a cleanup of every commit file before it.
        let results = vec![write(&target, &[99]).await];
        assert_eq!(commit_key(&target, &job("other"), 0, 1, &results).await, CommitOutcome::Committed);
        // With the intent's version, the probe reads the key's own commit file for its ids (version 0 is the
        // table's creation, key n landed at n + 1).
        let target_ref = &target;
        let ids_of = |n: u64| async move {
            match target_ref.probe(&CommitKey { job: job("cleaned"), n }, Some(n)).await {
                ProbeOutcome::Committed { ids } => ids,
                other => panic!("key {n}: {other:?}"),
            }
        };
        assert_eq!(ids_of(1).await, Some(vec![id("cp-1-1")]));
        assert_eq!(ids_of(0).await, Some(vec![id("cp-0-1")]));
        let table = target.open().await.unwrap_or_else(|e| panic!("{e}"));
        create_checkpoint(&table, None).await.unwrap_or_else(|e| panic!("checkpoint: {e}"));
        let latest = table.version().unwrap_or_else(|| panic!("a loaded table has a version"));
        // Every commit file before the checkpoint, whatever its age (the table's log retention is 30 days).
        let removed = cleanup_expired_logs_for(latest, table.log_store().as_ref(), i64::MAX, None)
            .await
            .unwrap_or_else(|e| panic!("cleanup: {e}"));
        assert!(removed >= 4, "the commit files of keys 0..3 were removed: {removed}");
        for n in 0..3 {
            let probe = target.probe(&CommitKey { job: ours.clone(), n }, None).await;
            assert_eq!(probe, ProbeOutcome::Committed { ids: None }, "key {n}");
            assert_eq!(ids_of(n).await, None, "key {n}: its commit file was cleaned, the txn still says it landed");
        }
        let next = target.probe(&CommitKey { job: ours.clone(), n: 3 }, None).await;
        assert_eq!(next, ProbeOutcome::NotCommitted);
        let results = vec![write(&target, &[3]).await];
        assert_eq!(commit_key(&target, &ours, 3, 1, &results).await, CommitOutcome::Committed);
        let resent = commit_key(&target, &ours, 2, 1, &results).await;
        assert!(matches!(resent, CommitOutcome::NotLanded { .. }), "{resent:?}");
        assert_eq!(sorted_rows(&target).await, [0, 1, 2, 3, 99]);
    }

    /// The storage's root, counting the requests that read (GET, HEAD, LIST), and naming the commit files
    /// (`_delta_log/<version>.json`, the table's history) read.
    #[derive(Debug)]
    struct CountingStore {
        inner: Arc<dyn ObjectStore>,
        reads: AtomicU32,
        commits_read: std::sync::Mutex<std::collections::BTreeSet<u64>>,
    }

    impl std::fmt::Display for CountingStore {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "CountingStore({})", self.inner)
        }
    }

    #[async_trait]
    impl ObjectStore for CountingStore {
        async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> OsResult<PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }

        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> OsResult<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }

        async fn get_opts(&self, location: &Path, options: GetOptions) -> OsResult<GetResult> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let name = location.as_ref().rsplit_once("_delta_log/").map(|(_, name)| name);
            if let Some(version) = name.and_then(|n| n.strip_suffix(".json")).and_then(|v| v.parse().ok()) {
                self.commits_read.lock().unwrap_or_else(|e| e.into_inner()).insert(version);
            }
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(&self, locations: BoxStream<'static, OsResult<Path>>) -> BoxStream<'static, OsResult<Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, OsResult<ObjectMeta>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.inner.list(prefix)
        }

        fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, OsResult<ObjectMeta>> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.inner.list_with_offset(prefix, offset)
        }

        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> OsResult<ListResult> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.inner.list_with_delimiter(prefix).await
        }

        async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> OsResult<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// Commits keys `from..to` of `ours`, one row each.
    async fn commit_keys(target: &DeltaTarget, ours: &JobId, keys: std::ops::Range<u64>) {
        for n in keys {
            let results = vec![write(target, &[i64::try_from(n).unwrap_or_else(|e| panic!("{e}"))]).await];
            assert_eq!(commit_key(target, ours, n, 1, &results).await, CommitOutcome::Committed, "key {n}");
        }
    }

    /// The probe reads none of the table's history before its last checkpoint: with a checkpoint every 10
    /// commits, probing a landed and a missing key after 25 and after 115 commits reads the commit files from the
    /// last checkpoint on, and only those. (The checkpoint itself grows with the table's live files: delta-rs loads
    /// them with every snapshot.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_probe_reads_only_the_commit_files_after_the_last_checkpoint() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("history").to_string_lossy().into_owned();
        std::fs::create_dir_all(&uri).unwrap_or_else(|e| panic!("{e}"));
        let url = deltalake::ensure_table_uri(&uri).unwrap_or_else(|e| panic!("{e}"));
        let table = DeltaTable::try_from_url(url).await.unwrap_or_else(|e| panic!("{e}"));
        let interval = deltalake::TableProperty::CheckpointInterval;
        table
            .create()
            .with_columns([StructField::new("row", DataType::LONG, false)])
            .with_configuration_property(interval, Some("10"))
            .await
            .unwrap_or_else(|e| panic!("create: {e}"));
        let counting = Arc::new(CountingStore {
            inner: Arc::new(LocalFileSystem::new()),
            reads: AtomicU32::new(0),
            commits_read: Default::default(),
        });
        let target = DeltaTarget::new(&uri);
        let counted = DeltaTarget::new(&uri).with_root_object_store(counting.clone());
        let ours = job("history");
        for (from, to) in [(0, 25), (25, 115)] {
            commit_keys(&target, &ours, from..to).await;
            counting.reads.store(0, Ordering::SeqCst);
            counting.commits_read.lock().unwrap_or_else(|e| e.into_inner()).clear();
            let landed = counted.probe(&CommitKey { job: ours.clone(), n: to - 1 }, None).await;
            let missing = counted.probe(&CommitKey { job: ours.clone(), n: to }, None).await;
            assert_eq!((landed, missing), (ProbeOutcome::Committed { ids: None }, ProbeOutcome::NotCommitted));
            let read = counting.commits_read.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let all = counting.reads.load(Ordering::SeqCst);
            println!("two probes after {to} commits: {all} objects read; commit files {read:?}");
            // Version 0 created the table, key n landed at version n + 1, a checkpoint every 10 versions: the
            // checkpointed version's own commit file (delta-rs reads its commitInfo) and those after it.
            let after_checkpoint: std::collections::BTreeSet<u64> = (to - to % 10..=to).collect();
            assert_eq!(read, after_checkpoint, "after {to} commits");
        }
    }

    #[test]
    fn the_key_check_commits_only_the_next_key_of_the_job() {
        assert_eq!(key_check(None, 0), KeyCheck::Commit);
        assert_eq!(key_check(Some(4), 5), KeyCheck::Commit);
        for (latest, n) in [(None, 1), (Some(5), 5), (Some(6), 5), (Some(3), 5), (Some(-1), 0)] {
            assert!(matches!(key_check(latest, n), KeyCheck::Refused(_)), "{latest:?} {n}");
        }
        assert!(matches!(probe_landed(Some(-2), 0), Err(reason) if reason.contains("negative")));
        assert_eq!(probe_landed(Some(5), 5), Ok(true));
        assert_eq!(probe_landed(Some(5), 6), Ok(false));
        assert_eq!(probe_landed(None, 0), Ok(false));
        assert_eq!(app_id(&job("nightly")), "sinkpoint.job.nightly");
    }

    /// Keys are a `u64`, Delta txn versions an `i64`: the last key that fits is committed, the next refused.
    #[test]
    fn a_key_above_the_largest_txn_version_is_refused_naming_the_limit() {
        let last = u64::try_from(i64::MAX).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key_check(Some(i64::MAX - 1), last), KeyCheck::Commit);
        let KeyCheck::Refused(reason) = key_check(Some(i64::MAX), last + 1) else { panic!("committed") };
        assert!(reason.contains("9223372036854775807") && reason.contains("new job"), "{reason}");
        assert_eq!(probe_landed(Some(i64::MAX), last + 1), Ok(false));
        assert_eq!(probe_landed(Some(i64::MAX), last), Ok(true));
    }
}

/// The write result encoding is stable (a golden vector) and refuses what the adapter would not commit.
mod write_results {
    use deltalake::kernel::Add;
    use sinkpoint::Format;
    use sinkpoint_delta::{ADD_FORMAT_VERSION, decode_add, encode_add};

    use super::*;

    fn add(path: &str) -> Add {
        Add {
            path: path.into(),
            size: 42,
            modification_time: 1_700_000_000_000,
            data_change: true,
            stats: Some(r#"{"numRecords":2}"#.into()),
            ..Add::default()
        }
    }

    #[test]
    fn an_add_encodes_as_the_golden_vector_and_decodes_back() {
        let result = encode_add(&add("part-0.parquet")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(result.format(), &Format::Delta);
        let golden = concat!(
            r#"{"v":1,"add":{"path":"part-0.parquet","partitionValues":{},"size":42,"#,
            r#""modificationTime":1700000000000,"dataChange":true,"stats":"{\"numRecords\":2}","#,
            r#""tags":null,"baseRowId":null,"defaultRowCommitVersion":null,"clusteringProvider":null}}"#
        );
        assert_eq!(std::str::from_utf8(result.bytes()).unwrap_or_default(), golden);
        assert_eq!(decode_add(&result).map(|a| a.path), Ok("part-0.parquet".to_owned()));
        assert_eq!(ADD_FORMAT_VERSION, 1);
    }

    #[test]
    fn an_add_outside_the_table_or_of_another_version_is_refused() {
        for path in ["../escape.parquet", "/abs.parquet", "s3://bucket/x.parquet", "a//b.parquet", ""] {
            assert!(encode_add(&add(path)).is_err(), "{path:?}");
        }
        let removal = Add { data_change: false, ..add("p.parquet") };
        assert!(encode_add(&removal).is_err());
        let v2 = br#"{"v":2,"add":{"path":"p","partitionValues":{},"size":1,"modificationTime":1,"dataChange":true}}"#;
        let result = WriteResult::new(Format::Delta, v2.to_vec()).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(decode_add(&result), Err(reason) if reason.contains("version 2")));
        let lance = WriteResult::new(Format::Lance, b"x".to_vec()).unwrap_or_else(|e| panic!("{e}"));
        assert!(decode_add(&lance).is_err());
    }

    /// A worker's data file is committed with the Add it staged, and reads back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_written_data_file_commits_and_reads_back() {
        let (_dir, target) = fresh("written").await;
        let result = write(&target, &[5, 6, 7]).await;
        let staged = decode_add(&result).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(staged.stats.as_deref(), Some(r#"{"numRecords":3}"#));
        assert!(staged.path.ends_with(".parquet") && !staged.path.contains('/'), "{}", staged.path);
        assert_eq!(commit_key(&target, &job("written"), 0, 1, &[result]).await, CommitOutcome::Committed);
        assert_eq!(sorted_rows(&target).await, [5, 6, 7]);
    }
}

/// The orphan data-file collector (`sinkpoint::gc::collect_data_files`) over a Delta table: [`DeltaDataFiles`]
/// names a result's file, reads the latest snapshot's files and tombstones for what is referenced, and the
/// collector deletes exactly the files of the job's dropped attempts.
mod collect {
    use std::collections::{BTreeMap, BTreeSet};

    use sinkpoint::gc::{CollectReport, CollectSettings, DataFiles, Verdict, collect_data_files};
    use sinkpoint::testkit::CrashBackend;
    use sinkpoint::{Committer, ErrorKind, Format, Store, SystemClock, TargetIdentity};
    use sinkpoint_delta::DeltaDataFiles;

    use super::*;

    const HOUR_MS: u64 = 3_600_000;

    /// The Parquet files in the table's root directory.
    fn files_on_disk(target: &DeltaTarget) -> BTreeSet<String> {
        std::fs::read_dir(target.uri())
            .unwrap_or_else(|e| panic!("listing {}: {e}", target.uri()))
            .map(|e| e.unwrap_or_else(|e| panic!("{e}")).file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".parquet"))
            .collect()
    }

    fn names(files: &DeltaDataFiles, results: &[WriteResult]) -> BTreeSet<String> {
        results.iter().flat_map(|r| files.files_of(r).unwrap_or_else(|e| panic!("files_of: {e}"))).collect()
    }

    fn verdicts(report: &CollectReport) -> BTreeMap<String, Verdict> {
        report.files.iter().map(|f| (f.file.clone(), f.verdict)).collect()
    }

    /// Writes one data file of `rows` and stages it as the one part of `attempt` of checkpoint `name`.
    async fn stage(store: &Store, target: &DeltaTarget, name: &str, attempt: u32, rows: &[i64]) -> Vec<WriteResult> {
        let results = vec![write(target, rows).await];
        let part = StagePart::new(Attempt::new(attempt), Part::FIRST)
            .keys(vec![name.as_bytes().to_vec()])
            .results(results.clone());
        store.stage(&id(name), part).await.unwrap_or_else(|e| panic!("stage {name}: {e}"));
        results
    }

    /// A restarted attempt (A's first) and an aborted checkpoint (B) leave their files in the ledger; a ledger
    /// entry naming a committed file (a discard of A's committed result) is kept because the table references
    /// it. Inside the grace period everything is kept; past it exactly the dropped attempts' files are deleted
    /// and the table reads every committed row once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_files_of_dropped_attempts_are_collected_and_no_committed_file_is() {
        let (_dir, target) = fresh("collect").await;
        let files = target.data_files();
        let identity = TargetIdentity::new(target.uri()).unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job("collect"), identity)
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));
        let a0 = stage(&store, &target, "a", 0, &[100]).await;
        assert_eq!(store.restart(&id("a")).await.unwrap_or_else(|e| panic!("restart: {e}")), a0);
        let a1 = stage(&store, &target, "a", 1, &[1, 2]).await;
        store.seal(&id("a"), 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
        let b0 = stage(&store, &target, "b", 0, &[200]).await;
        assert_eq!(store.abort(&id("b")).await.unwrap_or_else(|e| panic!("abort: {e}")), b0);
        let c0 = stage(&store, &target, "c", 0, &[3]).await;
        store.seal(&id("c"), 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
        Committer::new(&store, &target).finish().await.unwrap_or_else(|e| panic!("finish: {e}"));
        store.discard(&id("a"), Attempt::new(9), a1.clone()).await.unwrap_or_else(|e| panic!("discard: {e}"));

        let dropped: BTreeSet<String> = names(&files, &a0).union(&names(&files, &b0)).cloned().collect();
        let committed: BTreeSet<String> = names(&files, &a1).union(&names(&files, &c0)).cloned().collect();
        assert_eq!(files_on_disk(&target), dropped.union(&committed).cloned().collect());
        assert_eq!(files.referenced().await.unwrap_or_else(|e| panic!("referenced: {e}")), committed);
        let collect = |grace_ms: u64| {
            let (store, files) = (&store, &files);
            async move {
                collect_data_files(store, files, &SystemClock, &CollectSettings { grace_ms, apply: true })
                    .await
                    .unwrap_or_else(|e| panic!("collect (grace {grace_ms} ms): {e}"))
            }
        };
        let young = collect(HOUR_MS).await;
        assert!(
            verdicts(&young)
                .iter()
                .all(|(f, v)| *v == if dropped.contains(f) { Verdict::Young } else { Verdict::Referenced }),
            "{young:?}"
        );
        assert_eq!(files_on_disk(&target), dropped.union(&committed).cloned().collect(), "a young file went");
        let done = collect(0).await;
        let deleted: BTreeMap<String, Verdict> = dropped.iter().map(|f| (f.clone(), Verdict::Deleted)).collect();
        assert_eq!(verdicts(&done), deleted, "{done:?}");
        assert_eq!(files_on_disk(&target), committed, "exactly the dropped attempts' files were deleted");
        assert_eq!(sorted_rows(&target).await, [1, 2, 3]);
        assert_eq!(collect(0).await, CollectReport::default(), "a second collection finds nothing");
        for file in &dropped {
            assert_eq!(files.stat(file).await.unwrap_or_else(|e| panic!("stat: {e}")), None, "{file}");
            files.delete(file).await.unwrap_or_else(|e| panic!("deleting {file} again: {e}"));
        }
    }

    /// A removed file stays referenced while the table keeps its tombstone: a reader of an older version may open
    /// it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_removed_file_is_referenced_while_its_tombstone_is_kept() {
        let (_dir, target) = fresh("tombstone").await;
        let results = vec![write(&target, &[1]).await];
        assert_eq!(commit_key(&target, &job("tombstone"), 0, 1, &results).await, CommitOutcome::Committed);
        let files = target.data_files();
        let file = names(&files, &results);
        // An overwrite through delta-rs (the create builder's Overwrite mode) removes every file.
        let table = target.open().await.unwrap_or_else(|e| panic!("{e}"));
        table
            .create()
            .with_columns([StructField::new("row", DataType::LONG, false)])
            .with_save_mode(deltalake::protocol::SaveMode::Overwrite)
            .await
            .unwrap_or_else(|e| panic!("overwrite: {e}"));
        assert!(sorted_rows(&target).await.is_empty(), "the overwrite removed the file");
        assert_eq!(files.referenced().await.unwrap_or_else(|e| panic!("{e}")), file);
    }

    /// The collector's inputs it cannot have written are refused, each with the kind that says what to do.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn foreign_results_and_names_outside_the_table_are_refused() {
        let (_dir, target) = fresh("refuse").await;
        let files = target.data_files();
        let lance = WriteResult::new(Format::Lance, b"x".to_vec()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.files_of(&lance).map_err(|e| e.kind()), Err(ErrorKind::InvalidInput));
        let damaged = WriteResult::new(Format::Delta, b"{\"v\":1".to_vec()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.files_of(&damaged).map_err(|e| e.kind()), Err(ErrorKind::Corrupt));
        for name in ["../escape.parquet", "/abs.parquet", "_delta_log/../x"] {
            assert_eq!(files.stat(name).await.map_err(|e| e.kind()), Err(ErrorKind::InvalidInput), "{name}");
            assert_eq!(files.delete(name).await.map_err(|e| e.kind()), Err(ErrorKind::InvalidInput), "{name}");
        }
        let missing = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let nothing = DeltaTarget::new(missing.path().to_string_lossy()).data_files();
        assert!(nothing.referenced().await.unwrap_or_else(|e| panic!("{e}")).is_empty(), "no table, no references");
    }
}

/// One checkpoint across two Delta tables (`sinkpoint::multi::MultiTable`, a store per table): stopped at a named
/// crash point of either table's commit or between the per-table steps, the rerun puts each input into each table
/// exactly once, writing a half-sealed input only into the table that lacks it.
mod multi_table {
    use std::sync::atomic::AtomicUsize;

    use sinkpoint::commit::{CrashHook, crash_points};
    use sinkpoint::multi::{MultiPart, MultiTable, crash_points as multi_points};
    use sinkpoint::{ErrorKind, Store, TargetIdentity};

    use super::*;

    const INPUTS: i64 = 3;

    async fn open_store(dir: &std::path::Path, t: usize, target: &DeltaTarget) -> Store {
        let identity = TargetIdentity::new(target.uri()).unwrap_or_else(|e| panic!("{e}"));
        Store::builder(job("multi"), identity)
            .path(dir.join(format!("sink-{t}.redb")))
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store {t}: {e}"))
    }

    /// One run of the job: recover both tables, write and seal each input not processed in both (into the tables
    /// that lack it), commit after each input, finish.
    async fn run(dir: &std::path::Path, targets: &[DeltaTarget], hook: Option<CrashHook>) -> sinkpoint::Result<()> {
        let stores = [open_store(dir, 0, &targets[0]).await, open_store(dir, 1, &targets[1]).await];
        let ran: sinkpoint::Result<()> = async {
            let mut multi =
                MultiTable::builder().table(&stores[0], &targets[0]).table(&stores[1], &targets[1]).build()?;
            if let Some(hook) = hook {
                multi = multi.with_crash_hook(hook);
            }
            multi.recover().await?;
            for i in 0..INPUTS {
                let name = format!("input-{i}");
                if multi.is_processed(name.as_bytes())? {
                    continue;
                }
                let mut part = MultiPart::new(vec![name.clone().into_bytes()]);
                for t in multi.lacking(&id(&name))? {
                    part = part.results(t, vec![write(&targets[t], &[i]).await]);
                }
                multi.seal(&id(&name), part).await?;
                multi.commit_pending().await?;
            }
            multi.finish().await.map(drop)
        }
        .await;
        for store in stores {
            store.close_async().await;
        }
        ran
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crash_at_each_named_point_of_either_table_then_a_rerun_lands_each_input_in_each_table_once() {
        let points = [
            crash_points::AFTER_BEGIN_COMMIT,
            crash_points::AFTER_TARGET_COMMIT_BEFORE_MARK,
            multi_points::AFTER_TABLE_SEAL,
            multi_points::AFTER_TABLE_COMMIT,
        ];
        for point in points {
            // The points alternate between the tables: an odd nth stops in table 0, an even one in table 1.
            for nth in 1..=4 {
                let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
                let mut targets = Vec::new();
                for t in 0..2 {
                    let uri = dir.path().join(format!("table-{t}")).to_string_lossy().into_owned();
                    create_table(&uri).await;
                    targets.push(DeltaTarget::new(uri));
                }
                let seen = Arc::new(AtomicUsize::new(0));
                let counter = seen.clone();
                let hook: CrashHook =
                    Arc::new(move |at| at == point && counter.fetch_add(1, Ordering::SeqCst) + 1 == nth);
                let crashed = run(dir.path(), &targets, Some(hook)).await;
                let stopped = crashed.as_ref().map_err(sinkpoint::Error::kind);
                assert_eq!(stopped, Err(ErrorKind::Poisoned), "{point} #{nth}: stopped there");
                run(dir.path(), &targets, None).await.unwrap_or_else(|e| panic!("{point} #{nth}: rerun: {e}"));
                for target in &targets {
                    assert_eq!(sorted_rows(target).await, [0, 1, 2], "{point} #{nth}: {}", target.uri());
                }
            }
        }
    }
}
