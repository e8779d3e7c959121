//! The Lance target's tests, in one binary (each test binary links all of lance).

use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{DataType, Field, Schema};
use async_trait::async_trait;
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::{WriteMode, WriteParams};
use sinkpoint::testkit::conformance::{Inspect, SuiteSettings, run_conformance};
use sinkpoint::{
    CheckpointId, CommitKey, CommitOutcome, Format, JobId, ProbeOutcome, Target, TargetCommit, WriteResult,
};
use sinkpoint_lance::{LanceTarget, write_fragments};
use tokio::sync::OnceCell;

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
    let dataset = Dataset::open(uri).await.unwrap_or_else(|e| panic!("open {uri}: {e}"));
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

/// The conformance suite's results are names; this adapter writes each name as a one-row fragment at commit
/// time and commits the fragments through the real [`LanceTarget`], so what the suite counts is rows.
struct NamedRows {
    _dir: tempfile::TempDir,
    uri: String,
    target: LanceTarget,
    created: OnceCell<()>,
}

impl NamedRows {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("table.lance").to_string_lossy().into_owned();
        let target = LanceTarget::new(&uri);
        Self { _dir: dir, uri, target, created: OnceCell::new() }
    }

    async fn dataset(&self) -> Arc<Dataset> {
        self.created.get_or_init(|| async { drop(create_empty(&self.uri).await) }).await;
        Arc::new(Dataset::open(&self.uri).await.unwrap_or_else(|e| panic!("open: {e}")))
    }
}

#[async_trait]
impl Target for NamedRows {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        self.dataset().await;
        self.target.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let names: Vec<String> =
            commit.results.iter().map(|r| String::from_utf8_lossy(r.bytes()).into_owned()).collect();
        let mut results = Vec::new();
        for name in names {
            match write_fragments(self.dataset().await, vec![rows(&[&name])]).await {
                Ok(mut r) => results.append(&mut r),
                Err(e) => return CommitOutcome::NotLanded { reason: e.to_string() },
            }
        }
        self.target.commit(&TargetCommit { results: &results, ..commit.clone() }).await
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        self.dataset().await;
        self.target.probe(key, prepared_version).await
    }
}

#[async_trait]
impl Inspect for NamedRows {
    async fn landed_results(&self) -> sinkpoint::Result<Vec<WriteResult>> {
        self.dataset().await;
        names_in(&self.uri)
            .await
            .into_iter()
            .map(|name| WriteResult::new(Format::Other("dir-table".into()), name.into_bytes()))
            .collect()
    }
}

mod conformance {
    use super::*;

    fn settings() -> SuiteSettings {
        let settings = SuiteSettings { cases: 12, steps_max: 10, ..SuiteSettings::default() };
        println!("conformance seed {:#x}", settings.seed);
        settings
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conformance_passes_on_a_local_lance_dataset() {
        let report = run_conformance(NamedRows::new, &settings()).await.unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(report.cases, 12);
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
        let target = if fenced { LanceTarget::new(&uri) } else { LanceTarget::new(&uri).unfenced() };
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
    use lance_object_store::path::Path;
    use lance_table::format::{IndexMetadata, Manifest, Transaction};
    use lance_table::io::commit::{
        CommitError, CommitHandler, ConditionalPutCommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter,
    };
    use sinkpoint::Committer;
    use sinkpoint::testkit::CrashBackend;
    use sinkpoint::{Store, TargetIdentity};

    use super::*;

    const PASS: u8 = 0;
    /// F1: the manifest is published, then the answer is lost.
    const LAND_THEN_LOSE_ACK: u8 = 1;
    /// F2: the commit fails before anything is published.
    const FAIL_BEFORE_LANDING: u8 = 2;
    /// U: nothing is published, and the answer says the status is unknown.
    const REPORT_UNKNOWN: u8 = 3;

    /// The real local handler with one armed fault, which fires once.
    #[derive(Debug, Default)]
    struct FaultyHandler {
        armed: AtomicU8,
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
        let target = LanceTarget::new(&uri).with_commit_handler(handler.clone());
        let job = JobId::new("faults").unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job, TargetIdentity::new(uri.clone()).unwrap_or_else(|e| panic!("{e}")))
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));
        for i in 0..3 {
            let id = CheckpointId::new(format!("input-{i}")).unwrap_or_else(|e| panic!("{e}"));
            let name = format!("row-{i}");
            let results =
                write_fragments(dataset.clone(), vec![rows(&[&name])]).await.unwrap_or_else(|e| panic!("{e}"));
            store.stage(&id, 0, 0, vec![name.into_bytes()], results).await.unwrap_or_else(|e| panic!("stage: {e}"));
            store.seal(&id, 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
            if i == 1 {
                // The fault hits the first commit (of inputs 0 and 1); its outcome is whatever the committer says.
                handler.armed.store(fault, Ordering::SeqCst);
                println!("first commit: {:?}", Committer::new(&store, &target).commit_pending(false).await);
            }
        }
        Committer::new(&store, &target).recover().await.unwrap_or_else(|e| panic!("recover: {e}"));
        Committer::new(&store, &target).commit_pending(true).await.unwrap_or_else(|e| panic!("final commit: {e}"));
        assert!(store.pending().unwrap_or_else(|e| panic!("{e}")).checkpoints.is_empty());
        let mut names = names_in(&uri).await;
        names.sort();
        names
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

    /// An unknown outcome whose versions are cleaned up before the probe: the probe must say Unknown, never
    /// NotCommitted (which would re-commit blindly).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cleanup_between_an_unknown_outcome_and_its_probe_keeps_it_unknown() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let uri = dir.path().join("cleanup.lance").to_string_lossy().into_owned();
        let dataset = create_empty(&uri).await;
        let handler = Arc::new(FaultyHandler::default());
        let target = LanceTarget::new(&uri).with_commit_handler(handler.clone());
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
        let target = LanceTarget::new(&uri);
        let job = JobId::new("with-foreign").unwrap_or_else(|e| panic!("{e}"));
        let store = Store::builder(job, TargetIdentity::new(uri.clone()).unwrap_or_else(|e| panic!("{e}")))
            .backend(CrashBackend::new())
            .open()
            .await
            .unwrap_or_else(|e| panic!("open store: {e}"));
        for i in 0..INPUTS {
            let id = CheckpointId::new(format!("input-{i}")).unwrap_or_else(|e| panic!("{e}"));
            let name = format!("row-{i}");
            let results =
                write_fragments(dataset.clone(), vec![rows(&[&name])]).await.unwrap_or_else(|e| panic!("{e}"));
            store.stage(&id, 0, 0, vec![name.into_bytes()], results).await.unwrap_or_else(|e| panic!("stage: {e}"));
            store.seal(&id, 1).await.unwrap_or_else(|e| panic!("seal: {e}"));
            let report = Committer::new(&store, &target).commit_pending(i + 1 == INPUTS).await;
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
}
