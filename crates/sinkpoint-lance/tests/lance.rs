//! The Lance target's tests, in one binary (each test binary links all of lance).

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use async_trait::async_trait;
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::{WriteMode, WriteParams};
use sinkpoint::testkit::conformance::{Inspect, SuiteSettings, run_conformance};
use sinkpoint::{
    Attempt, CheckpointId, CommitKey, CommitOutcome, JobId, Part, ProbeOutcome, StagePart, Target, TargetCommit,
    WriteResult,
};
use sinkpoint_lance::{LanceTarget, write_fragments};
use tokio::sync::OnceCell;

/// The target over the dataset at `uri` (a path: never refused).
fn lance_target(uri: &str) -> LanceTarget {
    LanceTarget::new(uri).unwrap_or_else(|e| panic!("target {uri}: {e}"))
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, false)]))
}

fn rows(names: &[&str]) -> RecordBatch {
    let column = Arc::new(StringArray::from(names.to_vec()));
    RecordBatch::try_new(schema(), vec![column]).unwrap_or_else(|e| panic!("a batch: {e}"))
}

async fn create_empty(uri: &str) -> Arc<Dataset> {
    let reader = RecordBatchIterator::new(Vec::<Result<RecordBatch, _>>::new(), schema());
    let params = WriteParams { mode: WriteMode::Create, ..WriteParams::default() };
    Arc::new(Dataset::write(reader, uri, Some(params)).await.unwrap_or_else(|e| panic!("create {uri}: {e}")))
}

async fn names_in(uri: &str) -> Vec<String> {
    names_of(&Dataset::open(uri).await.unwrap_or_else(|e| panic!("open {uri}: {e}"))).await
}

async fn names_of(dataset: &Dataset) -> Vec<String> {
    let batches: Vec<RecordBatch> = dataset
        .scan()
        .try_into_stream()
        .await
        .unwrap_or_else(|e| panic!("scan: {e}"))
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("scan: {e}"));
    let mut out = Vec::new();
    for batch in batches {
        let column = batch.column(0).as_any().downcast_ref::<StringArray>().map(|a| a.iter().flatten());
        out.extend(column.into_iter().flatten().map(str::to_owned));
    }
    out
}

/// Writes row `row-{i}` as a fragment of `dataset` and stages and seals it as checkpoint `input-{i}`.
async fn seal_row(store: &sinkpoint::Store, dataset: &Arc<Dataset>, i: usize) {
    let id = CheckpointId::new(format!("input-{i}")).unwrap_or_else(|e| panic!("{e}"));
    let name = format!("row-{i}");
    let results = write_fragments(dataset.clone(), vec![rows(&[&name])]).await.unwrap_or_else(|e| panic!("{e}"));
    store
        .stage(&id, StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![name.into_bytes()]).results(results))
        .await
        .unwrap_or_else(|e| panic!("stage: {e}"));
    store.seal(&id, 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
}

/// The conformance suite's adapter: each batch of rows the suite names is written as an uncommitted fragment
/// with a `row` column (what a worker does), and committed through the real [`LanceTarget`], fenced or not.
struct SuiteTable {
    _dir: tempfile::TempDir,
    uri: String,
    target: LanceTarget,
    created: OnceCell<Arc<Dataset>>,
}

impl SuiteTable {
    fn new(fenced: bool) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("table.lance").to_string_lossy().into_owned();
        let target = if fenced { lance_target(&uri) } else { lance_target(&uri).unfenced() };
        Self { _dir: dir, uri, target, created: OnceCell::new() }
    }

    fn row_schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![Field::new("row", DataType::UInt64, false)]))
    }

    /// The dataset, created empty on first use (the suite makes a fresh table per case).
    async fn dataset(&self) -> Arc<Dataset> {
        self.created
            .get_or_init(|| async {
                let reader = RecordBatchIterator::new(Vec::<Result<RecordBatch, _>>::new(), Self::row_schema());
                let params = WriteParams { mode: WriteMode::Create, ..WriteParams::default() };
                let created = Dataset::write(reader, self.uri.as_str(), Some(params)).await;
                Arc::new(created.unwrap_or_else(|e| panic!("create {}: {e}", self.uri)))
            })
            .await
            .clone()
    }
}

#[async_trait]
impl Target for SuiteTable {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        self.dataset().await;
        self.target.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        self.dataset().await;
        self.target.commit(commit).await
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        self.dataset().await;
        self.target.probe(key, prepared_version).await
    }
}

#[async_trait]
impl Inspect for SuiteTable {
    async fn write_rows(&self, _checkpoint: &CheckpointId, rows: &[u64]) -> sinkpoint::Result<WriteResult> {
        let column = Arc::new(UInt64Array::from(rows.to_vec()));
        let batch = RecordBatch::try_new(Self::row_schema(), vec![column])
            .map_err(|e| sinkpoint::Error::invalid_input(format!("a batch of rows: {e}")))?;
        let mut results = write_fragments(self.dataset().await, vec![batch])
            .await
            .map_err(|e| sinkpoint::Error::target_with_source("writing a fragment", e))?;
        // One small batch is one fragment; the suite stages one result per batch.
        assert_eq!(results.len(), 1, "one batch of {} rows wrote {} fragments", rows.len(), results.len());
        Ok(results.remove(0))
    }

    async fn landed_rows(&self) -> sinkpoint::Result<Vec<u64>> {
        // A case whose every target call was a fault injected before the table: the table is empty.
        self.dataset().await;
        let dataset = Dataset::open(&self.uri)
            .await
            .map_err(|e| sinkpoint::Error::target_with_source("opening the dataset", e))?;
        let batches: Vec<RecordBatch> = dataset
            .scan()
            .try_into_stream()
            .await
            .map_err(|e| sinkpoint::Error::target_with_source("scanning", e))?
            .try_collect()
            .await
            .map_err(|e| sinkpoint::Error::target_with_source("scanning", e))?;
        let mut rows = Vec::new();
        for batch in batches {
            let column = batch
                .column(0)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| sinkpoint::Error::corrupt("the row column is not UInt64"))?;
            rows.extend(column.iter().flatten());
        }
        Ok(rows)
    }
}

mod conformance {
    use sinkpoint::testkit::conformance::TargetFaults;

    use super::*;

    fn settings() -> SuiteSettings {
        let cases = u32::try_from(sinkpoint::testkit::cases(100)).unwrap_or(u32::MAX);
        let settings = SuiteSettings { cases, steps_max: 10, ..SuiteSettings::default() };
        println!("conformance: {cases} cases (SINKPOINT_CASES to change), seed {:#x}", settings.seed);
        settings
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_conformance_suite_passes_on_a_local_lance_dataset() {
        let report = run_conformance(|| SuiteTable::new(true), &settings()).await.unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(
            report.scenarios, 8,
            "the writer scenarios ran (race, zombie, late zombie, two drivers; 0 and 1 keys before): {report:?}"
        );
    }

    /// A plain rebasing Lance Append (no key check, no V + 1 fence) is what the suite exists to refuse.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_plain_lance_append_fails_the_conformance_suite() {
        let settings = SuiteSettings { faults: TargetFaults::Own, ..settings() };
        let failure = run_conformance(|| SuiteTable::new(false), &settings).await.err();
        let failure = failure.unwrap_or_else(|| panic!("an unfenced Lance target passed the suite"));
        println!("{failure}");
    }
}

mod racing {
    use super::*;

    const ROUNDS: u64 = 20;

    fn key(n: u64) -> CommitKey {
        CommitKey { job: JobId::new("race").unwrap_or_else(|e| panic!("{e}")), n }
    }

    /// Two committers of one job, same key, same read version: exactly one lands each round; unfenced, both.
    async fn race(fenced: bool) -> Vec<usize> {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("race.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let target = if fenced { lance_target(&uri) } else { lance_target(&uri).unfenced() };
        let mut landed_per_round = Vec::new();
        for n in 0..ROUNDS {
            let prepared = target.version().await.unwrap_or_else(|e| panic!("{e}"));
            let ids = vec![CheckpointId::new(format!("cp-{n}")).unwrap_or_else(|e| panic!("{e}"))];
            let name = format!("round-{n}");
            let results =
                write_fragments(dataset.clone(), vec![rows(&[&name])]).await.unwrap_or_else(|e| panic!("{e}"));
            let k = key(n);
            let commit = TargetCommit {
                key: &k,
                ids: &ids,
                epoch: 1,
                results: &results,
                final_commit: false,
                prepared_version: prepared,
            };
            let (a, b) = tokio::join!(target.commit(&commit), target.commit(&commit));
            println!("round {n}: {a:?} / {b:?}");
            landed_per_round.push(names_in(&uri).await.iter().filter(|r| **r == name).count());
        }
        landed_per_round
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_committers_of_one_key_land_exactly_once_each_round() {
        assert_eq!(race(true).await, vec![1; ROUNDS as usize]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unfenced_committers_of_one_key_land_twice() {
        assert!(race(false).await.iter().any(|&n| n > 1));
    }
}

mod faults {
    use std::sync::atomic::{AtomicU8, Ordering};

    use lance_io::object_store::ObjectStore;
    use lance_table::format::{IndexMetadata, Manifest, Transaction};
    use lance_table::io::commit::{
        CommitError, CommitHandler, ConditionalPutCommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter,
    };
    use object_store::path::Path;
    use sinkpoint::Committer;
    use sinkpoint::testkit::CrashBackend;
    use sinkpoint::{Store, TargetIdentity};

    use super::*;

    const PASS: u8 = 0;
    /// F1: the manifest is published, then the answer is lost.
    pub(super) const LAND_THEN_LOSE_ACK: u8 = 1;
    /// F2: the commit fails before anything is published.
    const FAIL_BEFORE_LANDING: u8 = 2;
    /// U: nothing is published, and the answer says the status is unknown.
    const REPORT_UNKNOWN: u8 = 3;

    /// The real local handler with one armed fault, which fires once.
    #[derive(Debug, Default)]
    pub(super) struct FaultyHandler {
        pub(super) armed: AtomicU8,
    }

    #[async_trait]
    impl CommitHandler for FaultyHandler {
        fn is_version_not_found_definitive(&self) -> bool {
            true
        }

        async fn commit(
            &self,
            manifest: &mut Manifest,
            indices: Option<Vec<IndexMetadata>>,
            base_path: &Path,
            object_store: &ObjectStore,
            manifest_writer: ManifestWriter,
            naming_scheme: ManifestNamingScheme,
            transaction: Option<Transaction>,
        ) -> Result<ManifestLocation, CommitError> {
            let real = ConditionalPutCommitHandler;
            match self.armed.swap(PASS, Ordering::SeqCst) {
                LAND_THEN_LOSE_ACK => {
                    real.commit(
                        manifest,
                        indices,
                        base_path,
                        object_store,
                        manifest_writer,
                        naming_scheme,
                        transaction,
                    )
                    .await?;
                    Err(CommitError::OtherError(lance::Error::io("the acknowledgement was lost")))
                }
                FAIL_BEFORE_LANDING => Err(CommitError::OtherError(lance::Error::io("failed before publishing"))),
                REPORT_UNKNOWN => Err(CommitError::OtherError(lance::Error::commit_status_unknown_source(
                    manifest.version,
                    Box::new(std::io::Error::other("no answer")),
                ))),
                _ => {
                    real.commit(manifest, indices, base_path, object_store, manifest_writer, naming_scheme, transaction)
                        .await
                }
            }
        }
    }

    async fn job_with_fault(fault: u8) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("faults.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let handler = Arc::new(FaultyHandler::default());
        let target = lance_target(&uri).with_commit_handler(handler.clone());
        run_job_with_fault(dataset, &target, &handler, fault, "faults").await;
        let mut names = names_in(&uri).await;
        names.sort();
        names
    }

    /// Stages and seals rows 0..3, one input each; `fault` hits the first commit (of inputs 0 and 1), whatever
    /// the committer makes of it; then recovers and finishes with nothing left pending.
    pub(super) async fn run_job_with_fault(
        dataset: Arc<Dataset>,
        target: &LanceTarget,
        handler: &FaultyHandler,
        fault: u8,
        job: &str,
    ) {
        let job = JobId::new(job).unwrap_or_else(|e| panic!("{e}"));
        let identity = TargetIdentity::new(target.uri()).unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job, identity)
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));
        for i in 0..3 {
            let id = CheckpointId::new(format!("input-{i}")).unwrap_or_else(|e| panic!("{e}"));
            let name = format!("row-{i}");
            let results =
                write_fragments(dataset.clone(), vec![rows(&[&name])]).await.unwrap_or_else(|e| panic!("{e}"));
            let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![name.into_bytes()]).results(results);
            store.stage(&id, part).await.unwrap_or_else(|e| panic!("stage: {e}"));
            store.seal(&id, 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
            if i == 1 {
                handler.armed.store(fault, Ordering::SeqCst);
                println!("first commit: {:?}", Committer::new(&store, target).commit_pending().await);
            }
        }
        Committer::new(&store, target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        Committer::new(&store, target).finish().await.unwrap_or_else(|e| panic!("final commit: {e}"));
        assert!(store.pending().unwrap_or_else(|e| panic!("{e}")).checkpoints.is_empty());
    }

    fn every_row_once() -> Vec<String> {
        vec!["row-0".into(), "row-1".into(), "row-2".into()]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn f1_landed_then_lost_ack_commits_every_row_once() {
        assert_eq!(job_with_fault(LAND_THEN_LOSE_ACK).await, every_row_once());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn f2_failed_before_landing_commits_every_row_once() {
        assert_eq!(job_with_fault(FAIL_BEFORE_LANDING).await, every_row_once());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unknown_outcome_commits_every_row_once() {
        assert_eq!(job_with_fault(REPORT_UNKNOWN).await, every_row_once());
    }

    /// A handler that always finds the next version taken, as if a foreign writer won every race.
    #[derive(Debug, Default)]
    struct AlwaysTaken {
        attempts: std::sync::atomic::AtomicU32,
    }

    #[async_trait]
    impl CommitHandler for AlwaysTaken {
        fn is_version_not_found_definitive(&self) -> bool {
            true
        }

        async fn commit(
            &self,
            _manifest: &mut Manifest,
            _indices: Option<Vec<IndexMetadata>>,
            _base_path: &Path,
            _object_store: &ObjectStore,
            _manifest_writer: ManifestWriter,
            _naming_scheme: ManifestNamingScheme,
            _transaction: Option<Transaction>,
        ) -> Result<ManifestLocation, CommitError> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            Err(CommitError::CommitConflict)
        }
    }

    /// Foreign commits that take the next version every time: the commit re-reads and tries again a bounded
    /// number of times, then answers NotLanded (nothing of ours was published).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_next_version_taken_every_time_ends_not_landed_after_the_retry_limit() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("taken.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let handler = Arc::new(AlwaysTaken::default());
        let target = lance_target(&uri).with_commit_handler(handler.clone());
        let key = CommitKey { job: JobId::new("taken").unwrap_or_else(|e| panic!("{e}")), n: 0 };
        let ids = vec![CheckpointId::new("cp-0").unwrap_or_else(|e| panic!("{e}"))];
        let results = write_fragments(dataset, vec![rows(&["ours"])]).await.unwrap_or_else(|e| panic!("{e}"));
        let prepared_version = target.version().await.unwrap_or_else(|e| panic!("{e}"));
        let commit =
            TargetCommit { key: &key, ids: &ids, epoch: 1, results: &results, final_commit: true, prepared_version };
        let outcome = target.commit(&commit).await;
        assert!(matches!(&outcome, CommitOutcome::NotLanded { reason } if reason.contains("in a row")), "{outcome:?}");
        let attempts = handler.attempts.load(Ordering::SeqCst);
        assert_eq!(attempts, sinkpoint_lance::limits::FOREIGN_COMMIT_RETRIES_MAX + 1);
        assert!(names_in(&uri).await.is_empty());
    }

    /// An unknown outcome whose versions are cleaned up before the probe: the probe must say Unknown, never
    /// NotCommitted (which would re-commit blindly).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cleanup_between_an_unknown_outcome_and_its_probe_keeps_it_unknown() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("cleanup.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let handler = Arc::new(FaultyHandler::default());
        let target = lance_target(&uri).with_commit_handler(handler.clone());
        let prepared = target.version().await.unwrap_or_else(|e| panic!("{e}"));
        let k = CommitKey { job: JobId::new("cleanup").unwrap_or_else(|e| panic!("{e}")), n: 0 };
        let ids = vec![CheckpointId::new("cp-0").unwrap_or_else(|e| panic!("{e}"))];
        let results = write_fragments(dataset.clone(), vec![rows(&["ours"])]).await.unwrap_or_else(|e| panic!("{e}"));
        let commit = TargetCommit {
            key: &k,
            ids: &ids,
            epoch: 1,
            results: &results,
            final_commit: true,
            prepared_version: prepared,
        };
        handler.armed.store(LAND_THEN_LOSE_ACK, Ordering::SeqCst);
        assert!(matches!(target.commit(&commit).await, CommitOutcome::Unknown { .. }));
        // A foreign writer appends, then maintenance removes every version but the latest.
        let foreign = Dataset::write(
            RecordBatchIterator::new(vec![Ok(rows(&["foreign"]))], schema()),
            uri.as_str(),
            Some(WriteParams { mode: WriteMode::Append, ..WriteParams::default() }),
        )
        .await
        .unwrap_or_else(|e| panic!("foreign append: {e}"));
        foreign
            .cleanup_old_versions(chrono::Duration::zero(), Some(true), None)
            .await
            .unwrap_or_else(|e| panic!("cleanup: {e}"));
        let probe = target.probe(&k, prepared).await;
        assert!(matches!(probe, ProbeOutcome::Unknown { .. }), "{probe:?}");
    }
}

mod foreign {
    use std::sync::atomic::{AtomicBool, Ordering};

    use sinkpoint::testkit::CrashBackend;
    use sinkpoint::{Committer, Store, TargetIdentity};

    use super::*;

    const INPUTS: usize = 8;

    /// Another writer appends to the same dataset throughout the job: our commits re-read and retry when it
    /// takes V + 1, and in the end every sinkpoint row and every foreign row is there once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_foreign_appender_throughout_a_job_leaves_every_row_once() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("foreign.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let stop = Arc::new(AtomicBool::new(false));
        let appender = {
            let (uri, stop) = (uri.clone(), stop.clone());
            tokio::spawn(async move {
                let mut written = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    let name = format!("foreign-{written}");
                    let reader = RecordBatchIterator::new(vec![Ok(rows(&[&name]))], schema());
                    let params = WriteParams { mode: WriteMode::Append, ..WriteParams::default() };
                    // A foreign writer retries its own conflicts (Lance's default); a failed append wrote nothing.
                    if Dataset::write(reader, uri.as_str(), Some(params)).await.is_ok() {
                        written += 1;
                    }
                    // Often enough to take V + 1 from some of our attempts, not so often that it starves them.
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                written
            })
        };
        let target = lance_target(&uri);
        let job = JobId::new("with-foreign").unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job, TargetIdentity::new(uri.clone()).unwrap_or_else(|e| panic!("{e}")))
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));
        for i in 0..INPUTS {
            seal_row(&store, &dataset, i).await;
            let committer = Committer::new(&store, &target);
            let report = if i + 1 == INPUTS { committer.finish().await } else { committer.commit_pending().await };
            assert!(report.is_ok(), "commit {i}: {report:?}");
        }
        stop.store(true, Ordering::SeqCst);
        let foreign = appender.await.unwrap_or_else(|e| panic!("appender: {e}"));
        let names = names_in(&uri).await;
        for i in 0..INPUTS {
            assert_eq!(names.iter().filter(|n| **n == format!("row-{i}")).count(), 1, "row-{i}");
        }
        for f in 0..foreign {
            assert_eq!(names.iter().filter(|n| **n == format!("foreign-{f}")).count(), 1, "foreign-{f}");
        }
        println!("{foreign} foreign appends during the job");
    }

    /// Two new stores of one job without a mirror (both epoch 1, the same checkpoint id): the second recovers
    /// first (its probe finds key 0 absent), the first commits key 0, then the second begins key 0 with its own
    /// fragment. Its key check covers every version since its probe and sees a commit of key 0 with other data
    /// files: it is refused (`WrongStore`), and the dataset holds the input's row once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_driver_without_a_mirror_whose_probe_came_first_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("drivers.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let target = lance_target(&uri);
        let open = || async {
            let job = JobId::new("two-drivers").unwrap_or_else(|e| panic!("{e}"));
            Store::builder(job, TargetIdentity::new(uri.clone()).unwrap_or_else(|e| panic!("{e}")))
                .backend(CrashBackend::new())
                .open()
                .await
                .unwrap_or_else(|e| panic!("open store: {e}"))
        };
        let seal = |store: Store, row: &'static str| {
            let dataset = dataset.clone();
            async move {
                let id = CheckpointId::new("input-x").unwrap_or_else(|e| panic!("{e}"));
                let results = write_fragments(dataset, vec![rows(&[row])]).await.unwrap_or_else(|e| panic!("{e}"));
                let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"x".to_vec()]).results(results);
                store.stage_and_seal(&id, part, 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
                store
            }
        };
        let second = open().await;
        Committer::new(&second, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        let first = seal(open().await, "row-x").await;
        Committer::new(&first, &target).finish().await.unwrap_or_else(|e| panic!("first: {e}"));
        let second = seal(second, "row-x-again").await;
        let refused = Committer::new(&second, &target).commit_pending().await;
        let refused = refused.expect_err("the second driver's key 0 must be refused");
        assert_eq!(refused.kind(), sinkpoint::ErrorKind::WrongStore, "{refused}");
        assert_eq!(names_in(&uri).await, ["row-x"]);
    }
}

mod busy {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use sinkpoint::testkit::CrashBackend;
    use sinkpoint::{Committer, Store, TargetIdentity};

    use super::*;

    /// Plain Lance appenders beside the job, each appending as fast as it can.
    const APPENDERS: usize = 2;
    /// The job's commits, one input each.
    const COMMITS: usize = 24;
    /// Foreign appends made before the job starts.
    const WARM_UP_APPENDS: usize = 20;
    /// The bound on one commit's wall time while the appenders run.
    const COMMIT_WALL_MS_MAX: u128 = 10_000;

    /// Foreign appenders flat out (together well over 40 appends a second on a local disk): every commit of the
    /// job lands within [`COMMIT_WALL_MS_MAX`], and every row, ours and theirs, is in the table once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[expect(clippy::disallowed_methods, reason = "what is checked is each commit's wall time beside real appenders")]
    async fn every_commit_lands_within_its_bound_beside_appenders_running_flat_out() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("busy.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let stop = Arc::new(AtomicBool::new(false));
        let total = Arc::new(AtomicUsize::new(0));
        let appenders: Vec<_> = (0..APPENDERS)
            .map(|a| {
                let (uri, stop, total) = (uri.clone(), stop.clone(), total.clone());
                tokio::spawn(async move {
                    let mut written = 0usize;
                    while !stop.load(Ordering::SeqCst) {
                        let name = format!("foreign-{a}-{written}");
                        let reader = RecordBatchIterator::new(vec![Ok(rows(&[&name]))], schema());
                        let params = WriteParams { mode: WriteMode::Append, ..WriteParams::default() };
                        if Dataset::write(reader, uri.as_str(), Some(params)).await.is_ok() {
                            written += 1;
                            total.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    written
                })
            })
            .collect();
        // The job starts once the appenders run at full speed.
        while total.load(Ordering::SeqCst) < WARM_UP_APPENDS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let before = total.load(Ordering::SeqCst);
        let target = lance_target(&uri);
        let job = JobId::new("busy").unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job, TargetIdentity::new(uri.clone()).unwrap_or_else(|e| panic!("{e}")))
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));
        let started = Instant::now();
        let mut walls = Vec::new();
        for i in 0..COMMITS {
            seal_row(&store, &dataset, i).await;
            let committer = Committer::new(&store, &target);
            let begun = Instant::now();
            let report = committer.commit_pending().await;
            walls.push(begun.elapsed().as_millis());
            assert!(report.as_ref().is_ok_and(|r| r.committed_keys.len() == 1), "commit {i}: {report:?}");
        }
        let seconds = started.elapsed().as_secs_f64();
        let during = total.load(Ordering::SeqCst) - before;
        stop.store(true, Ordering::SeqCst);
        let mut foreign = Vec::new();
        for appender in appenders {
            foreign.push(appender.await.unwrap_or_else(|e| panic!("appender: {e}")));
        }
        let appends: usize = foreign.iter().sum();
        println!(
            "{during} foreign appends during the job's {seconds:.1} s ({:.0}/s; {appends} in all); commit wall \
             times (ms): {walls:?}",
            during as f64 / seconds
        );
        let names = names_in(&uri).await;
        for i in 0..COMMITS {
            assert_eq!(names.iter().filter(|n| **n == format!("row-{i}")).count(), 1, "row-{i}");
        }
        for (a, written) in foreign.iter().enumerate() {
            for f in 0..*written {
                let name = format!("foreign-{a}-{f}");
                assert_eq!(names.iter().filter(|n| **n == name).count(), 1, "{name}");
            }
        }
        let slowest = walls.iter().max().copied().unwrap_or_default();
        assert!(slowest <= COMMIT_WALL_MS_MAX, "a commit took {slowest} ms beside the appenders: {walls:?}");
    }
}

mod write_results {
    use lance::dataset::transaction::Operation;
    use lance::dataset::{CommitBuilder, transaction::TransactionBuilder};
    use sinkpoint::Format;
    use sinkpoint_lance::{FRAGMENT_JSON_FORMAT, decode_fragment};

    use super::*;

    /// `FragmentMetadata.to_json()` of a three-row fragment, as pylance 14.0.2 printed it (through `json.dumps`).
    const PYLANCE_FRAGMENT_JSON: &str = r#"{"id": 0, "files": [{"fields": [0], "column_indices": [0], "file_major_version": 2, "file_minor_version": 2, "file_size_bytes": 345, "base_id": null, "path": "101101110110000100000101d726714f15a3837539902b2fcb.lance"}], "overlays": [], "physical_rows": 3, "deletion_file": null, "row_id_meta": null, "created_at_version_meta": null, "last_updated_at_version_meta": null}"#;

    fn json_result(bytes: Vec<u8>) -> WriteResult {
        WriteResult::new(Format::Other(FRAGMENT_JSON_FORMAT.into()), bytes).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_fragment_in_pylance_json_form_decodes() {
        let fragment = decode_fragment(&json_result(PYLANCE_FRAGMENT_JSON.into())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fragment.physical_rows, Some(3));
        assert_eq!(fragment.files.len(), 1);
        assert_eq!(fragment.files[0].path, "101101110110000100000101d726714f15a3837539902b2fcb.lance");
    }

    #[test]
    fn a_result_that_is_not_a_fragment_is_refused_saying_why() {
        let other = WriteResult::new(Format::Parquet, b"PAR1".to_vec()).unwrap_or_else(|e| panic!("{e}"));
        let refused = decode_fragment(&other).err().unwrap_or_else(|| panic!("a Parquet result decoded"));
        assert!(refused.contains("Parquet"), "{refused}");
        let garbage = decode_fragment(&json_result(b"{\"id\": ".to_vec())).err();
        assert!(garbage.is_some_and(|e| e.contains("not FragmentMetadata JSON")));
        let proto = WriteResult::new(Format::Lance, vec![0xff; 7]).unwrap_or_else(|e| panic!("{e}"));
        assert!(decode_fragment(&proto).is_err());
    }

    /// A fragment staged in either form commits the same rows: the protobuf bytes a Rust worker stages and the
    /// JSON a Python worker stages (serialised here from the same kind of fragment, as pylance does).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fragments_staged_as_protobuf_or_json_commit_their_rows() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("forms.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let proto =
            write_fragments(dataset.clone(), vec![rows(&["from-rust"])]).await.unwrap_or_else(|e| panic!("{e}"));
        let python =
            write_fragments(dataset.clone(), vec![rows(&["from-python"])]).await.unwrap_or_else(|e| panic!("{e}"));
        let fragment = decode_fragment(&python[0]).unwrap_or_else(|e| panic!("{e}"));
        let json = json_result(serde_json::to_vec(&fragment).unwrap_or_else(|e| panic!("{e}")));
        let fragments = [&proto[0], &json].into_iter().map(|r| decode_fragment(r).unwrap_or_else(|e| panic!("{e}")));
        let transaction =
            TransactionBuilder::new(dataset.version().version, Operation::Append { fragments: fragments.collect() })
                .build();
        CommitBuilder::new(dataset).execute(transaction).await.unwrap_or_else(|e| panic!("commit: {e}"));
        let mut names = names_in(&uri).await;
        names.sort();
        assert_eq!(names, ["from-python", "from-rust"]);
    }
}

/// The same job with the dataset on the S3 API (moto, which `.ci/run` starts): `SINKPOINT_S3_ENDPOINT` names
/// it. Outside CI without it the test says SKIP loudly; in CI a missing endpoint fails it.
mod s3 {
    use std::collections::HashMap;

    use lance_io::object_store::{ObjectStoreParams, StorageOptionsAccessor};

    use super::faults::{FaultyHandler, LAND_THEN_LOSE_ACK, run_job_with_fault};
    use super::*;

    fn options(endpoint: &str) -> HashMap<String, String> {
        [
            ("aws_endpoint", endpoint),
            ("allow_http", "true"),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_region", "us-east-1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// A job on S3 whose first commit lands and loses its acknowledgement (F1): every row once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_on_the_s3_api_with_a_lost_ack_commits_every_row_once() {
        let Some(endpoint) = sinkpoint::testkit::s3_endpoint() else { return };
        let bucket = format!("sinkpoint-lance-{}", std::process::id());
        sinkpoint::testkit::create_s3_bucket(&endpoint, &bucket).unwrap_or_else(|e| panic!("{e}"));
        let uri = format!("s3://{bucket}/table.lance");
        let params = ObjectStoreParams {
            storage_options_accessor: Some(Arc::new(StorageOptionsAccessor::with_static_options(options(&endpoint)))),
            ..ObjectStoreParams::default()
        };
        let reader = RecordBatchIterator::new(Vec::<Result<RecordBatch, _>>::new(), schema());
        let create = WriteParams { mode: WriteMode::Create, store_params: Some(params), ..WriteParams::default() };
        let dataset = Arc::new(
            Dataset::write(reader, uri.as_str(), Some(create)).await.unwrap_or_else(|e| panic!("create {uri}: {e}")),
        );
        let handler = Arc::new(FaultyHandler::default());
        let target = lance_target(&uri).with_storage_options(options(&endpoint)).with_commit_handler(handler.clone());
        run_job_with_fault(dataset, &target, &handler, LAND_THEN_LOSE_ACK, "on-s3").await;
        let dataset = target.open().await.unwrap_or_else(|e| panic!("open: {e}"));
        let mut names = names_of(&dataset).await;
        names.sort();
        assert_eq!(names, ["row-0", "row-1", "row-2"]);
    }
}

/// Table maintenance during a job with an unknown outcome: cleanup that honours the store's retention watermark
/// keeps the probe exact; cleanup that ignores it makes the key Unknown — never a duplicate — and the operator's
/// verdict settles it.
mod retention {
    use std::sync::atomic::{AtomicBool, Ordering};

    use lance::dataset::cleanup::{CleanupPolicy, CleanupPolicyBuilder};
    use sinkpoint::testkit::CrashBackend;
    use sinkpoint::{Committer, Resolution, Store, TargetIdentity};

    use super::faults::{FaultyHandler, LAND_THEN_LOSE_ACK};
    use super::*;

    /// The Lance target whose probes fail from its first commit on until `probe_down` is cleared: the key
    /// stays CommitUnknown meanwhile (the probe of key 0 before it is begun still answers).
    struct ProbeDown {
        inner: LanceTarget,
        probe_down: AtomicBool,
    }

    #[async_trait]
    impl Target for ProbeDown {
        async fn version(&self) -> sinkpoint::Result<Option<u64>> {
            self.inner.version().await
        }

        async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
            self.probe_down.store(true, Ordering::SeqCst);
            self.inner.commit(commit).await
        }

        async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
            if self.probe_down.load(Ordering::SeqCst) {
                return ProbeOutcome::Unknown { reason: "the probe is down".into() };
            }
            self.inner.probe(key, prepared_version).await
        }
    }

    /// Every version older than a second from now: all but the latest, which Lance always keeps.
    fn expire_everything() -> CleanupPolicy {
        CleanupPolicyBuilder::default().before_timestamp(chrono::Utc::now() + chrono::Duration::seconds(1)).build()
    }

    /// A job whose one commit landed with its ack lost and its probe down, then a foreign append: returns the
    /// store (key 0 CommitUnknown), the target and the dataset's URI.
    async fn unknown_key_then_foreign_append(dir: &std::path::Path) -> (Store, ProbeDown, String) {
        let uri = dir.join("retention.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let handler = Arc::new(FaultyHandler::default());
        let target = ProbeDown {
            inner: lance_target(&uri).with_commit_handler(handler.clone()),
            probe_down: AtomicBool::new(false),
        };
        let job = JobId::new("retention").unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job, TargetIdentity::new(uri.clone()).unwrap_or_else(|e| panic!("{e}")))
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));
        let id = CheckpointId::new("input-0").unwrap_or_else(|e| panic!("{e}"));
        let results = write_fragments(dataset, vec![rows(&["ours"])]).await.unwrap_or_else(|e| panic!("{e}"));
        let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![b"input-0".to_vec()]).results(results);
        store.stage(&id, part).await.unwrap_or_else(|e| panic!("stage: {e}"));
        store.seal(&id, 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
        handler.armed.store(LAND_THEN_LOSE_ACK, Ordering::SeqCst);
        let committer = Committer::new(&store, &target);
        let first = committer.finish().await;
        println!("first commit: {first:?}");
        assert_eq!(names_in(&uri).await, ["ours"], "the commit landed");
        let foreign = Dataset::write(
            RecordBatchIterator::new(vec![Ok(rows(&["foreign"]))], schema()),
            uri.as_str(),
            Some(WriteParams { mode: WriteMode::Append, ..WriteParams::default() }),
        )
        .await;
        foreign.unwrap_or_else(|e| panic!("foreign append: {e}"));
        (store, target, uri)
    }

    fn landed_once(names: &[String]) {
        let mut sorted = names.to_vec();
        sorted.sort();
        assert_eq!(sorted, ["foreign", "ours"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cleanup_that_honours_the_retention_watermark_keeps_the_probe_exact() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let (store, target, uri) = unknown_key_then_foreign_append(dir.path()).await;
        let watermark = store.retention_watermark().unwrap_or_else(|e| panic!("{e}"));
        assert!(watermark.is_some(), "key 0 is in flight, so maintenance is constrained");
        let removed = target.inner.cleanup_old_versions(expire_everything(), watermark).await;
        println!("cleanup under watermark {watermark:?}: {:?}", removed.unwrap_or_else(|e| panic!("cleanup: {e}")));
        target.probe_down.store(false, Ordering::SeqCst);
        let report = Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        assert!(report.blocked.is_none(), "{report:?}");
        assert!(report.finished, "{report:?}");
        landed_once(&names_in(&uri).await);
        assert_eq!(store.retention_watermark().unwrap_or_else(|e| panic!("{e}")), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cleanup_that_ignores_the_watermark_leaves_the_key_unknown_until_a_not_committed_verdict_settles_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let (store, target, uri) = unknown_key_then_foreign_append(dir.path()).await;
        let removed = target.inner.cleanup_old_versions(expire_everything(), None).await;
        println!("cleanup ignoring the watermark: {:?}", removed.unwrap_or_else(|e| panic!("cleanup: {e}")));
        target.probe_down.store(false, Ordering::SeqCst);
        let report = Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        assert!(report.blocked.is_some(), "key 0 landed but its transaction is gone: {report:?}");
        landed_once(&names_in(&uri).await);
        // The lossless way out, whatever the truth: the re-send's key check reads the job's mark, which says
        // whether the same commit landed. Here it did, so nothing is appended again.
        store
            .operator()
            .resolve(0, Resolution::NotCommitted, "its version was cleaned up; the re-send's key check decides")
            .await
            .unwrap_or_else(|e| panic!("resolve: {e}"));
        let report = Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        assert!(report.blocked.is_none() && report.finished, "{report:?}");
        landed_once(&names_in(&uri).await);
    }
}

/// The orphan data-file collector (`sinkpoint::gc::collect_data_files`) over a Lance dataset: [`LanceDataFiles`] names a
/// result's files, reads every version's manifest for what is referenced, and the collector deletes exactly the
/// files of the job's dropped attempts.
mod collect {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path as FsPath;

    use lance_table::format::{DeletionFile, DeletionFileType};
    use sinkpoint::gc::{CollectReport, CollectSettings, DataFiles, Verdict, collect_data_files};
    use sinkpoint::testkit::CrashBackend;
    use sinkpoint::{Committer, ErrorKind, Format, Store, SystemClock, TargetIdentity};
    use sinkpoint_lance::{FRAGMENT_JSON_FORMAT, LanceDataFiles, decode_fragment};

    use super::*;

    const HOUR_MS: u64 = 3_600_000;

    fn id(name: &str) -> CheckpointId {
        CheckpointId::new(name).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every file under `dir` of the dataset at `root` ("data" or "_deletions"), as `dir/<name>`.
    fn files_on_disk(root: &FsPath, dir: &str) -> BTreeSet<String> {
        match std::fs::read_dir(root.join(dir)) {
            Ok(entries) => entries
                .map(|e| format!("{dir}/{}", e.unwrap_or_else(|e| panic!("{e}")).file_name().to_string_lossy()))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => panic!("listing {dir}: {e}"),
        }
    }

    fn names(files: &LanceDataFiles, results: &[WriteResult]) -> BTreeSet<String> {
        results.iter().flat_map(|r| files.files_of(r).unwrap_or_else(|e| panic!("files_of: {e}"))).collect()
    }

    fn verdicts(report: &CollectReport) -> BTreeMap<String, Verdict> {
        report.files.iter().map(|f| (f.file.clone(), f.verdict)).collect()
    }

    /// Writes one fragment of `rows` and stages it as the one part of `attempt` of checkpoint `name`.
    async fn stage(
        store: &Store,
        dataset: &Arc<Dataset>,
        name: &str,
        attempt: u32,
        rows_of: &[&str],
    ) -> Vec<WriteResult> {
        let results = write_fragments(dataset.clone(), vec![rows(rows_of)]).await.unwrap_or_else(|e| panic!("{e}"));
        let part = StagePart::new(Attempt::new(attempt), Part::FIRST)
            .keys(vec![name.as_bytes().to_vec()])
            .results(results.clone());
        store.stage(&id(name), part).await.unwrap_or_else(|e| panic!("stage {name}: {e}"));
        results
    }

    /// A restarted attempt (A's first) and an aborted checkpoint (B) leave their fragment files in the ledger; a
    /// ledger entry naming a committed fragment (a discard of A's committed result) must be kept because the
    /// table references it. A dry run deletes nothing; inside the grace period everything is kept; past it
    /// exactly the dropped attempts' files are deleted, the table reads every committed row once, the ledger is
    /// empty and a second collection finds nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_files_of_dropped_attempts_are_collected_and_no_committed_file_is() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let root = dir.path().join("collect.lance");
        let uri = root.to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let target = lance_target(&uri);
        let files = target.data_files();
        let job = JobId::new("collect").unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job, TargetIdentity::new(uri.clone()).unwrap_or_else(|e| panic!("{e}")))
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));

        let a0 = stage(&store, &dataset, "a", 0, &["a-first-try"]).await;
        assert_eq!(store.restart(&id("a")).await.unwrap_or_else(|e| panic!("restart: {e}")), a0);
        let a1 = stage(&store, &dataset, "a", 1, &["a-0", "a-1"]).await;
        store.seal(&id("a"), 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
        let b0 = stage(&store, &dataset, "b", 0, &["b-aborted"]).await;
        assert_eq!(store.abort(&id("b")).await.unwrap_or_else(|e| panic!("abort: {e}")), b0);
        let c0 = stage(&store, &dataset, "c", 0, &["c-0"]).await;
        store.seal(&id("c"), 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
        Committer::new(&store, &target).finish().await.unwrap_or_else(|e| panic!("finish: {e}"));
        // A ledger entry naming a committed fragment: the table's references must win over it.
        store.discard(&id("a"), Attempt::new(9), a1.clone()).await.unwrap_or_else(|e| panic!("discard: {e}"));
        assert_eq!(store.garbage(None, 100).unwrap_or_else(|e| panic!("{e}")).len(), 3);

        let dropped: BTreeSet<String> = names(&files, &a0).union(&names(&files, &b0)).cloned().collect();
        let committed: BTreeSet<String> = names(&files, &a1).union(&names(&files, &c0)).cloned().collect();
        assert_eq!((dropped.len(), committed.len()), (2, 2), "one data file a fragment: {dropped:?} {committed:?}");
        assert!(dropped.iter().chain(&committed).all(|f| f.starts_with("data/") && f.ends_with(".lance")));
        assert_eq!(files_on_disk(&root, "data"), dropped.union(&committed).cloned().collect());
        let referenced = files.referenced().await.unwrap_or_else(|e| panic!("referenced: {e}"));
        assert_eq!(referenced, committed, "every committed fragment and nothing dropped");
        let expect = |dropped_verdict: Verdict| -> BTreeMap<String, Verdict> {
            dropped
                .iter()
                .map(|f| (f.clone(), dropped_verdict))
                .chain(
                    committed
                        .iter()
                        .filter(|f| names(&files, &a1).contains(*f))
                        .map(|f| (f.clone(), Verdict::Referenced)),
                )
                .collect()
        };
        let collect = |grace_ms: u64, apply: bool| {
            let (store, files) = (&store, &files);
            async move {
                collect_data_files(store, files, &SystemClock, &CollectSettings { grace_ms, apply })
                    .await
                    .unwrap_or_else(|e| panic!("collect (grace {grace_ms} ms, apply {apply}): {e}"))
            }
        };

        let dry = collect(0, false).await;
        assert_eq!(verdicts(&dry), expect(Verdict::Due), "{dry:?}");
        assert_eq!((dry.entries, dry.forgotten), (3, 0));
        assert!(dry.tally(Verdict::Due).1 > 0, "the due files' bytes are reported: {dry:?}");
        assert_eq!(files_on_disk(&root, "data"), dropped.union(&committed).cloned().collect(), "a dry run deleted");

        let young = collect(HOUR_MS, true).await;
        assert_eq!(verdicts(&young), expect(Verdict::Young), "{young:?}");
        assert_eq!(young.forgotten, 1, "only the referenced entry is settled: {young:?}");
        assert_eq!(files_on_disk(&root, "data"), dropped.union(&committed).cloned().collect(), "a young file went");
        assert_eq!(store.garbage(None, 100).unwrap_or_else(|e| panic!("{e}")).len(), 2);

        let done = collect(0, true).await;
        let deleted: BTreeMap<String, Verdict> = dropped.iter().map(|f| (f.clone(), Verdict::Deleted)).collect();
        assert_eq!(verdicts(&done), deleted, "{done:?}");
        assert_eq!((done.entries, done.forgotten), (2, 2));
        assert_eq!(files_on_disk(&root, "data"), committed, "exactly the dropped attempts' files were deleted");
        for file in &dropped {
            assert_eq!(files.stat(file).await.unwrap_or_else(|e| panic!("stat: {e}")), None, "{file}");
        }
        let mut landed = names_in(&uri).await;
        landed.sort();
        assert_eq!(landed, ["a-0", "a-1", "c-0"], "every committed row once, nothing of a dropped attempt");
        assert!(store.garbage(None, 100).unwrap_or_else(|e| panic!("{e}")).is_empty());
        assert_eq!(collect(0, true).await, CollectReport::default(), "a second collection finds nothing");
        // Deleting what is gone is not an error.
        for file in &dropped {
            files.delete(file).await.unwrap_or_else(|e| panic!("delete {file} again: {e}"));
        }
    }

    /// `referenced` reads every version that still exists, not only the latest: after an overwrite the latest
    /// version references none of the earlier fragments, yet a reader may still open the earlier versions. It
    /// covers deletion files too, and once Lance's cleanup expires the old versions their files are no longer
    /// referenced (and gone).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_existing_version_is_referenced_not_only_the_latest() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let root = dir.path().join("versions.lance");
        let uri = root.to_string_lossy().into_owned();
        create_empty(&uri).await;
        let files = LanceDataFiles::new(&uri);
        let write = |names: &'static [&'static str], mode: WriteMode| {
            let uri = uri.clone();
            async move {
                let reader = RecordBatchIterator::new(vec![Ok(rows(names))], schema());
                let params = WriteParams { mode, ..WriteParams::default() };
                Dataset::write(reader, uri.as_str(), Some(params)).await.unwrap_or_else(|e| panic!("write: {e}"))
            }
        };
        write(&["x"], WriteMode::Append).await;
        let mut dataset = write(&["y", "z"], WriteMode::Append).await;
        dataset.delete("name = 'y'").await.unwrap_or_else(|e| panic!("delete: {e}"));
        let before_overwrite = files_on_disk(&root, "data");
        let deletions = files_on_disk(&root, "_deletions");
        assert_eq!((before_overwrite.len(), deletions.len()), (2, 1), "{before_overwrite:?} {deletions:?}");

        let overwritten = write(&["w"], WriteMode::Overwrite).await;
        let latest: BTreeSet<String> =
            overwritten.fragments().iter().flat_map(|f| &f.files).map(|f| format!("data/{}", f.path)).collect();
        assert!(latest.is_disjoint(&before_overwrite), "the latest version references no earlier fragment");
        let referenced = files.referenced().await.unwrap_or_else(|e| panic!("referenced: {e}"));
        let everything: BTreeSet<String> =
            files_on_disk(&root, "data").union(&files_on_disk(&root, "_deletions")).cloned().collect();
        assert_eq!(referenced, everything, "every file every version references (here: every file written)");
        assert!(referenced.is_superset(&before_overwrite) && referenced.is_superset(&deletions));

        // Expire every version but the latest: the earlier files leave the set (and the disk).
        let policy = lance::dataset::cleanup::CleanupPolicyBuilder::default()
            .before_timestamp(chrono::Utc::now() + chrono::Duration::seconds(1))
            .build();
        lance_target(&uri).cleanup_old_versions(policy, None).await.unwrap_or_else(|e| panic!("cleanup: {e}"));
        let referenced = files.referenced().await.unwrap_or_else(|e| panic!("referenced: {e}"));
        assert_eq!(referenced, latest);
        assert_eq!(files_on_disk(&root, "data"), latest);
    }

    /// A result's files: its data files under `data/` and its deletion file under `_deletions/`, in either
    /// staged form; another format, damaged bytes, a file of another base and a name that leaves the directory
    /// are refused, and `stat`/`delete` take only names `files_of` gives.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_results_files_are_named_relative_to_the_root_and_anything_else_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("names.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let files = LanceDataFiles::new(&uri);
        let results = write_fragments(dataset, vec![rows(&["n"])]).await.unwrap_or_else(|e| panic!("{e}"));
        let mut fragment = decode_fragment(&results[0]).unwrap_or_else(|e| panic!("{e}"));
        let data = format!("data/{}", fragment.files[0].path);
        assert_eq!(files.files_of(&results[0]).unwrap_or_else(|e| panic!("{e}")), std::slice::from_ref(&data));
        let stat = files.stat(&data).await.unwrap_or_else(|e| panic!("{e}"));
        let on_disk = std::fs::metadata(dir.path().join("names.lance").join(&data)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stat.map(|s| s.bytes), Some(on_disk.len()));
        assert!(stat.is_some_and(|s| s.modified_ms > 1_600_000_000_000), "{stat:?}");

        let json = |fragment: &lance_table::format::Fragment| {
            let bytes = serde_json::to_vec(fragment).unwrap_or_else(|e| panic!("{e}"));
            WriteResult::new(Format::Other(FRAGMENT_JSON_FORMAT.into()), bytes).unwrap_or_else(|e| panic!("{e}"))
        };
        fragment.id = 4;
        fragment.deletion_file = Some(DeletionFile {
            read_version: 7,
            id: 9,
            file_type: DeletionFileType::Array,
            num_deleted_rows: Some(1),
            base_id: None,
        });
        let with_deletion = files.files_of(&json(&fragment)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(with_deletion, [data.clone(), "_deletions/4-7-9.arrow".to_owned()]);

        let kind = |result: &WriteResult| files.files_of(result).err().map(|e| e.kind());
        let parquet = WriteResult::new(Format::Parquet, b"PAR1".to_vec()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kind(&parquet), Some(ErrorKind::InvalidInput));
        let damaged = WriteResult::new(Format::Lance, vec![0xff; 7]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(kind(&damaged), Some(ErrorKind::Corrupt));
        let mut escaping = fragment.clone();
        escaping.files[0].path = "../../elsewhere.lance".into();
        assert_eq!(kind(&json(&escaping)), Some(ErrorKind::Corrupt));
        let mut other_base = fragment.clone();
        other_base.files[0].base_id = Some(1);
        assert_eq!(kind(&json(&other_base)), Some(ErrorKind::InvalidInput));

        for name in ["../names.lance/_versions/1.manifest", "data/../x", "_versions/1.manifest", "data/", "x"] {
            let refused = files.stat(name).await.err().map(|e| e.kind());
            assert_eq!(refused, Some(ErrorKind::InvalidInput), "stat {name}");
            assert_eq!(
                files.delete(name).await.err().map(|e| e.kind()),
                Some(ErrorKind::InvalidInput),
                "delete {name}"
            );
        }
        files.delete(&data).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.stat(&data).await.unwrap_or_else(|e| panic!("{e}")), None);
    }

    /// No dataset at the URI: nothing is referenced, every file is gone, and deleting one succeeds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missing_dataset_references_nothing() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let files = LanceDataFiles::new(dir.path().join("none.lance").to_string_lossy());
        assert!(files.referenced().await.unwrap_or_else(|e| panic!("{e}")).is_empty());
        assert_eq!(files.stat("data/x.lance").await.unwrap_or_else(|e| panic!("{e}")), None);
        files.delete("data/x.lance").await.unwrap_or_else(|e| panic!("{e}"));
    }
}

/// Proves the job mark's encoding is stable (golden vectors) and its decisions commit only what is neither
/// there nor fenced, probing at most one transaction.
mod mark {
    use std::collections::HashMap;

    use sinkpoint::{CheckpointId, Epoch};
    use sinkpoint_lance::mark::*;

    fn ids(names: &[&str]) -> Vec<CheckpointId> {
        names.iter().map(|n| CheckpointId::new(*n).unwrap_or_else(|e| panic!("{e}"))).collect()
    }

    fn mark(key: u64, epoch: Epoch, digest: &str) -> JobMark {
        JobMark::new(key, epoch, 7, digest.to_owned())
    }

    /// The encoding is a format: these bytes are what tables hold, and what the Python side reads back.
    #[test]
    fn golden_mark_and_digest() {
        let d = digest(&ids(&["cp-b", "cp-a"]), &["f2.lance".to_owned(), "f1.lance".to_owned()]);
        assert_eq!(d, "661e1c84a0a99cff3fa0090e3bba9303", "the digest of a fixed commit changed: a format change");
        let (key, value) = JobMark::new(3, 2, 41, d).entry("nightly");
        assert_eq!(key, "sinkpoint.job.nightly");
        assert_eq!(value, r#"{"v":1,"key":3,"epoch":2,"version":41,"digest":"661e1c84a0a99cff3fa0090e3bba9303"}"#);
    }

    #[test]
    fn the_digest_ignores_order_and_tells_ids_from_files() {
        let a = digest(&ids(&["x", "y"]), &["f".to_owned()]);
        assert_eq!(a, digest(&ids(&["y", "x"]), &["f".to_owned()]));
        assert_ne!(a, digest(&ids(&["x", "y", "f"]), &[]));
        assert_ne!(a, digest(&ids(&["x"]), &["y".to_owned(), "f".to_owned()]));
    }

    #[test]
    fn a_mark_round_trips_and_a_damaged_or_newer_one_is_refused() {
        let m = mark(4, 1, "ab");
        let (key, value) = m.entry("j");
        let mut metadata = HashMap::from([(key.clone(), value)]);
        assert_eq!(read_mark(&metadata, "j"), Ok(Some(m)));
        assert_eq!(read_mark(&metadata, "other"), Ok(None));
        metadata.insert(key.clone(), "{not json".to_owned());
        assert!(read_mark(&metadata, "j").expect_err("refused").contains("does not parse"));
        metadata.insert(key, r#"{"v":2,"key":1,"epoch":1,"version":1,"digest":"ab"}"#.to_owned());
        assert!(read_mark(&metadata, "j").expect_err("refused").contains("format 2"));
    }

    #[test]
    fn the_key_check_commits_only_what_is_neither_there_nor_fenced() {
        assert_eq!(key_check(None, 0, 1, "d"), KeyCheck::Commit);
        assert_eq!(key_check(Some(&mark(2, 1, "d")), 3, 1, "e"), KeyCheck::Commit);
        assert_eq!(key_check(Some(&mark(3, 1, "d")), 3, 1, "d"), KeyCheck::AlreadyLanded);
        for (landed, n, epoch, digest) in [
            (mark(3, 1, "d"), 3, 1, "e"), // another set under our key
            (mark(3, 1, "d"), 3, 2, "d"), // the same set begun by another epoch: the probe decides whose it is
            (mark(4, 1, "d"), 3, 1, "e"), // a later key landed
            (mark(2, 5, "d"), 3, 1, "e"), // a newer epoch wrote
        ] {
            assert!(matches!(key_check(Some(&landed), n, epoch, digest), KeyCheck::Refused(_)), "{landed:?} vs {n}");
        }
    }

    #[test]
    fn the_probe_reads_at_most_the_landed_keys_transaction() {
        assert_eq!(probe_step(None, 0), ProbeStep::NotCommitted);
        assert_eq!(probe_step(Some(&mark(2, 1, "d")), 3), ProbeStep::NotCommitted);
        assert_eq!(probe_step(Some(&mark(3, 1, "d")), 3), ProbeStep::ReadIds { version: 7 });
        assert_eq!(probe_step(Some(&mark(4, 1, "d")), 3), ProbeStep::LandedBefore { version: 7 });
    }
}

/// Proves a Lance table's ordinary maintenance — cleanup of every old version (the adapter's, or Lance's own
/// with or without `delete_unverified`), compaction, auto-cleanup configured on the dataset — never blocks a job
/// or makes it land a row twice or not at all, that a staged file cleanup deleted is refused before it is
/// committed, and that URI schemes Lance commits to unconditionally are refused.
mod maintenance {
    use std::path::Path as FsPath;

    use lance::dataset::cleanup::{CleanupPolicy, CleanupPolicyBuilder};
    use lance::dataset::optimize::{CompactionOptions, compact_files};
    use sinkpoint::commit::CrashHook;
    use sinkpoint::{Committer, ErrorKind, Store, TargetIdentity};

    use super::*;

    /// Every version older than a second from now: all but the latest, which Lance always keeps.
    fn expire_everything() -> CleanupPolicy {
        CleanupPolicyBuilder::default().before_timestamp(chrono::Utc::now() + chrono::Duration::seconds(1)).build()
    }

    /// The job's store in `dir` (a file: reopening it is a new open, which probes the table again).
    async fn open_store(dir: &FsPath, job: &str, uri: &str) -> Store {
        let job = JobId::new(job).unwrap_or_else(|e| panic!("{e}"));
        Store::builder(job.clone(), TargetIdentity::new(uri).unwrap_or_else(|e| panic!("{e}")))
            .path(dir.join(format!("{job}.redb")))
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store {job}: {e}"))
    }

    /// Stages and seals `name` as one input of `store`, its fragment written into the dataset at `uri`.
    async fn seal(store: &Store, uri: &str, name: &str) {
        let dataset = Arc::new(Dataset::open(uri).await.unwrap_or_else(|e| panic!("open: {e}")));
        let results = write_fragments(dataset, vec![rows(&[name])]).await.unwrap_or_else(|e| panic!("{e}"));
        let id = CheckpointId::new(name).unwrap_or_else(|e| panic!("{e}"));
        let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(vec![name.as_bytes().to_vec()]).results(results);
        store.stage(&id, part).await.unwrap_or_else(|e| panic!("stage {name}: {e}"));
        store.seal(&id, 1).await.unwrap_or_else(|e| panic!("seal {name}: {e}"));
    }

    async fn foreign_append(uri: &str, name: &str) {
        let params = WriteParams { mode: WriteMode::Append, ..WriteParams::default() };
        Dataset::write(RecordBatchIterator::new(vec![Ok(rows(&[name]))], schema()), uri, Some(params))
            .await
            .unwrap_or_else(|e| panic!("foreign append: {e}"));
    }

    async fn compact(uri: &str) {
        let mut dataset = Dataset::open(uri).await.unwrap_or_else(|e| panic!("open: {e}"));
        let options = CompactionOptions { target_rows_per_fragment: 1_000, ..CompactionOptions::default() };
        let metrics = compact_files(&mut dataset, options, None).await.unwrap_or_else(|e| panic!("compact: {e}"));
        println!("compaction: {metrics:?}");
    }

    /// A foreign append, compaction, then a cleanup of every old version that ignores the retention watermark.
    async fn foreign_writes_then_maintenance_ignoring_the_watermark(uri: &str) {
        foreign_append(uri, "foreign").await;
        compact(uri).await;
        Dataset::open(uri)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .cleanup_with_policy(expire_everything())
            .await
            .unwrap_or_else(|e| panic!("cleanup ignoring the watermark: {e}"));
    }

    async fn sorted_names(uri: &str) -> Vec<String> {
        let mut names = names_in(uri).await;
        names.sort();
        names
    }

    fn table(dir: &FsPath) -> String {
        dir.join("table.lance").to_string_lossy().into_owned()
    }

    /// A cleanup that removed version 1 (and every other old one) made every later open's first probe
    /// Unknown, for every job on the dataset, forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_a_cleanup_of_every_old_version_the_job_goes_on_and_a_new_job_starts() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = table(dir.path());
        create_empty(&uri).await;
        let target = lance_target(&uri);
        {
            let store = open_store(dir.path(), "nightly", &uri).await;
            seal(&store, &uri, "a").await;
            Committer::new(&store, &target).commit_pending().await.unwrap_or_else(|e| panic!("key 0: {e}"));
            foreign_append(&uri, "foreign").await;
            let watermark = store.retention_watermark().unwrap_or_else(|e| panic!("{e}"));
            let stats = target.cleanup_old_versions(expire_everything(), watermark).await;
            println!("cleanup: {:?}", stats.unwrap_or_else(|e| panic!("cleanup: {e}")));
            store.close_async().await;
        }
        let store = open_store(dir.path(), "nightly", &uri).await;
        seal(&store, &uri, "b").await;
        Committer::new(&store, &target).finish().await.unwrap_or_else(|e| panic!("key 1 after the cleanup: {e}"));
        let other = open_store(dir.path(), "backfill", &uri).await;
        seal(&other, &uri, "c").await;
        Committer::new(&other, &target).recover().await.unwrap_or_else(|e| panic!("a new job: {e}"));
        Committer::new(&other, &target).finish().await.unwrap_or_else(|e| panic!("a new job: {e}"));
        assert_eq!(sorted_names(&uri).await, ["a", "b", "c", "foreign"]);
        // And a store that lost its state is still refused after the cleanup: the mark names key 1.
        let lost = Store::builder(
            JobId::new("nightly").unwrap_or_else(|e| panic!("{e}")),
            TargetIdentity::new(uri.clone()).unwrap_or_else(|e| panic!("{e}")),
        )
        .path(dir.path().join("lost.redb"))
        .open()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let refused = Committer::new(&lost, &target).recover().await.expect_err("a fresh store of a job in the table");
        assert_eq!(refused.kind(), ErrorKind::WrongStore, "{refused}");
    }

    /// Compaction between the jobs' commits, and between a key's intent and its send (a crash there), then a
    /// cleanup: every row once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn compaction_and_cleanup_between_commits_and_inside_a_crashed_key_leave_every_row_once() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = table(dir.path());
        create_empty(&uri).await;
        let target = lance_target(&uri);
        {
            let store = open_store(dir.path(), "nightly", &uri).await;
            seal(&store, &uri, "a").await;
            Committer::new(&store, &target).commit_pending().await.unwrap_or_else(|e| panic!("key 0: {e}"));
            compact(&uri).await;
            seal(&store, &uri, "b").await;
            let crash: CrashHook = Arc::new(|point| point == "after-begin-commit");
            let crashed = Committer::new(&store, &target).with_crash_hook(crash).commit_pending().await;
            assert!(crashed.is_err(), "stopped after the intent: {crashed:?}");
            store.close_async().await;
        }
        foreign_writes_then_maintenance_ignoring_the_watermark(&uri).await;
        let store = open_store(dir.path(), "nightly", &uri).await;
        let report = Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        assert_eq!(report.recommitted, Some(1), "the probe is exact after the cleanup: {report:?}");
        Committer::new(&store, &target).finish().await.unwrap_or_else(|e| panic!("finish: {e}"));
        assert_eq!(sorted_names(&uri).await, ["a", "b", "foreign"]);
    }

    /// A key landed and the process died before marking it; compaction and a cleanup ignoring the watermark
    /// removed its version, so the reopened store's probe cannot read its ids: the key is blocked, never
    /// re-sent blindly. A not-committed verdict lands nothing twice (the re-send is refused: the mark holds the
    /// older epoch's send), and the committed verdict the message gives for a job with one driver settles it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_landed_key_whose_version_was_cleaned_before_a_reopen_is_settled_by_the_verdict_the_error_names() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = table(dir.path());
        create_empty(&uri).await;
        let target = lance_target(&uri);
        {
            let store = open_store(dir.path(), "nightly", &uri).await;
            seal(&store, &uri, "a").await;
            let crash: CrashHook = Arc::new(|point| point == "after-target-commit-before-mark");
            let crashed = Committer::new(&store, &target).with_crash_hook(crash).finish().await;
            assert!(crashed.is_err(), "stopped after the landing: {crashed:?}");
            store.close_async().await;
        }
        foreign_writes_then_maintenance_ignoring_the_watermark(&uri).await;
        let store = open_store(dir.path(), "nightly", &uri).await;
        let report = Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        let Some(sinkpoint::commit::Blocked::Unknown { reason, .. }) = report.blocked else { panic!("{report:?}") };
        assert!(reason.contains("key 0 landed") && reason.contains("resolve 0 committed"), "{reason}");
        store
            .operator()
            .resolve(0, sinkpoint::Resolution::NotCommitted, "try the re-send")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let resent = Committer::new(&store, &target).recover().await;
        println!("after the not-committed verdict: {resent:?}");
        assert_eq!(sorted_names(&uri).await, ["a", "foreign"], "nothing landed twice");
        store
            .operator()
            .resolve(0, sinkpoint::Resolution::Committed, "the mark says key 0 landed; this job has one driver")
            .await
            .unwrap_or_else(|e| panic!("resolve: {e}"));
        let report = Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        assert!(report.blocked.is_none() && report.finished, "{report:?}");
        assert_eq!(sorted_names(&uri).await, ["a", "foreign"]);
    }

    /// Lance's auto-cleanup, configured on the dataset, ran inside sinkpoint's own commits, expiring versions
    /// regardless of the retention watermark.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn auto_cleanup_configured_on_the_dataset_does_not_run_inside_a_commit() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = table(dir.path());
        let mut dataset = Arc::unwrap_or_clone(create_empty(&uri).await);
        foreign_append(&uri, "foreign").await;
        dataset.checkout_latest().await.unwrap_or_else(|e| panic!("{e}"));
        dataset
            .update_config([("lance.auto_cleanup.interval", "1"), ("lance.auto_cleanup.older_than", "0s")])
            .await
            .unwrap_or_else(|e| panic!("configure auto-cleanup: {e}"));
        let before = dataset.versions().await.unwrap_or_else(|e| panic!("{e}")).len();
        let store = open_store(dir.path(), "nightly", &uri).await;
        seal(&store, &uri, "a").await;
        Committer::new(&store, &lance_target(&uri)).finish().await.unwrap_or_else(|e| panic!("finish: {e}"));
        let latest = Dataset::open(&uri).await.unwrap_or_else(|e| panic!("{e}"));
        let after = latest.versions().await.unwrap_or_else(|e| panic!("{e}")).len();
        assert_eq!(after, before + 1, "every version before the commit is still there");
        assert_eq!(sorted_names(&uri).await, ["a", "foreign"]);
    }

    /// A cleanup with `delete_unverified` deleted a staged fragment; committing it made every scan fail.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_staged_file_a_cleanup_deleted_is_refused_and_the_table_stays_readable() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = table(dir.path());
        let dataset = create_empty(&uri).await;
        foreign_append(&uri, "foreign").await;
        let results = write_fragments(dataset, vec![rows(&["staged"])]).await.unwrap_or_else(|e| panic!("{e}"));
        let stats = Dataset::open(&uri)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .cleanup_old_versions(chrono::Duration::zero(), Some(true), None)
            .await
            .unwrap_or_else(|e| panic!("cleanup: {e}"));
        assert!(stats.data_files_removed >= 1, "the staged file was deleted: {stats:?}");
        let key = CommitKey { job: JobId::new("nightly").unwrap_or_else(|e| panic!("{e}")), n: 0 };
        let ids = vec![CheckpointId::new("staged").unwrap_or_else(|e| panic!("{e}"))];
        let target = lance_target(&uri);
        let prepared_version = target.version().await.unwrap_or_else(|e| panic!("{e}"));
        let commit =
            TargetCommit { key: &key, ids: &ids, epoch: 1, results: &results, final_commit: true, prepared_version };
        match target.commit(&commit).await {
            CommitOutcome::NotLanded { reason } => {
                assert!(reason.contains("staged data files are gone") && reason.contains("staged"), "{reason}");
            }
            other => panic!("a commit naming a deleted file must be refused before it lands: {other:?}"),
        }
        assert_eq!(sorted_names(&uri).await, ["foreign"], "the table is readable and unchanged");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_adapters_cleanup_refuses_delete_unverified() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = table(dir.path());
        create_empty(&uri).await;
        let policy = CleanupPolicyBuilder::default().delete_unverified(true).build();
        let refused = lance_target(&uri).cleanup_old_versions(policy, None).await.expect_err("refused");
        assert!(refused.to_string().contains("delete_unverified"), "{refused}");
    }

    /// `file+uring://` gets Lance's unconditional handler: the V + 1 fence would guard nothing.
    #[test]
    fn a_uri_scheme_lance_commits_to_unconditionally_is_refused_naming_it() {
        for uri in ["file+uring:///tmp/t.lance", "s3+ddb://bucket/t.lance", "gcs-unknown://b/t"] {
            let refused = LanceTarget::new(uri).expect_err(uri);
            assert_eq!(refused.kind(), sinkpoint::ErrorKind::InvalidInput, "{refused}");
            let scheme = uri.split("://").next().unwrap_or_default();
            assert!(refused.to_string().contains(scheme), "{refused}");
        }
        for uri in ["/tmp/t.lance", "file:///tmp/t.lance", "s3://bucket/t.lance", "memory://t"] {
            assert!(LanceTarget::new(uri).is_ok(), "{uri}");
        }
    }
}
