//! Proves that the targets shipped with the crate pass the adapter conformance suite
//! (`testkit::conformance`): the reference `DirTable` on an in-memory store and in a local directory, and the
//! watermark table; that an adapter bringing its own faults and write results runs it unwrapped; and that targets
//! breaking the contract fail it, a target lacking only key exclusivity included. The suite is what an adapter
//! author runs against their own target.
//!
//! `SINKPOINT_CASES` sets the case count of the targets that pass (defaults of 40 to 300 each); the seeds are
//! fixed and printed. The targets that must fail run a fixed count.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::DirTable;
use sinkpoint::testkit::conformance::{Inspect, SuiteSettings, TargetFaults, run_conformance};
use sinkpoint::testkit::{self, FaultyTarget, HistoryTable, WatermarkTable};
use sinkpoint::{CheckpointId, CommitKey, CommitOutcome, Format, ProbeOutcome, Target, TargetCommit, WriteResult};

/// The suite's settings for a target that should pass: `SINKPOINT_CASES` cases if set, else `cases`, from `seed`.
fn settings(cases: u32, seed: u64) -> SuiteSettings {
    let cases = u32::try_from(testkit::cases(u64::from(cases))).unwrap_or(u32::MAX);
    announce(cases, seed, "SINKPOINT_CASES to change");
    SuiteSettings { cases, seed, ..SuiteSettings::default() }
}

/// The suite's settings for a target that must fail it: always `cases` cases, enough to catch it, whatever
/// `SINKPOINT_CASES` says (a replay of one case elsewhere must not make these fail).
fn fixed(cases: u32, seed: u64) -> SuiteSettings {
    announce(cases, seed, "fixed: the target must fail");
    SuiteSettings { cases, seed, ..SuiteSettings::default() }
}

/// Straight to stderr, past the test harness's capture, so that a passing run shows it too.
fn announce(cases: u32, seed: u64, note: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "conformance: {cases} cases from seed {seed} ({note})");
}

/// The test targets' write result: the row ids as text, `1,2`.
fn rows_result(rows: &[u64]) -> WriteResult {
    let text = rows.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    WriteResult::new(Format::Other("rows".into()), text.into_bytes()).unwrap()
}

fn rows_of(result: &WriteResult) -> Vec<u64> {
    std::str::from_utf8(result.bytes()).unwrap().split(',').map(|r| r.parse().unwrap()).collect()
}

#[tokio::test]
async fn dir_table_in_memory_conforms() {
    let make = || DirTable::new(Arc::new(InMemory::new()), Path::from("t"));
    let report = run_conformance(make, &settings(300, 1)).await.unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(
        report.scenarios, 8,
        "the writer scenarios ran (race, zombie, late zombie, two drivers; 0 and 1 keys before): {report:?}"
    );
    assert!(report.crashes > report.cases as u64, "the workloads should crash more than once each: {report:?}");
}

#[tokio::test]
async fn dir_table_in_a_local_directory_conforms() {
    let root = tempfile::tempdir().unwrap();
    let next = std::sync::atomic::AtomicU32::new(0);
    let make = || {
        let dir = root.path().join(next.fetch_add(1, std::sync::atomic::Ordering::SeqCst).to_string());
        DirTable::local(dir).unwrap()
    };
    run_conformance(make, &settings(40, 2)).await.unwrap_or_else(|f| panic!("{f}"));
}

#[tokio::test]
async fn the_watermark_table_conforms() {
    let report = run_conformance(WatermarkTable::new, &settings(300, 3)).await.unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(
        report.scenarios, 8,
        "the writer scenarios ran (race, zombie, late zombie, two drivers; 0 and 1 keys before): {report:?}"
    );
}

/// A target that checks a key only in the versions since the commit was prepared (as the Lance adapter does):
/// a writer refused because another writer's key 0 landed must not begin key 0 again past that version.
#[tokio::test]
async fn the_history_table_conforms() {
    let report = run_conformance(HistoryTable::new, &settings(300, 4)).await.unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(
        report.scenarios, 8,
        "the writer scenarios ran (race, zombie, late zombie, two drivers; 0 and 1 keys before): {report:?}"
    );
}

/// An adapter that brings its own faults (here: a seeded `FaultyTarget` inside the adapter) and its own write
/// results (data files of a `DirTable`), run with `TargetFaults::Own`: the suite wraps nothing.
struct FaultyAdapter(FaultyTarget<DirTable>);

#[async_trait::async_trait]
impl Target for FaultyAdapter {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        self.0.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        self.0.commit(commit).await
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        self.0.probe(key, prepared_version).await
    }
}

#[async_trait::async_trait]
impl Inspect for FaultyAdapter {
    async fn write_rows(&self, checkpoint: &CheckpointId, rows: &[u64]) -> sinkpoint::Result<WriteResult> {
        self.0.inner().write_rows(checkpoint, rows).await
    }

    async fn landed_rows(&self) -> sinkpoint::Result<Vec<u64>> {
        self.0.inner().landed_rows().await
    }
}

#[tokio::test]
async fn an_adapter_with_its_own_faults_runs_the_suite_unwrapped() {
    let seed = 6;
    let next = std::sync::atomic::AtomicU64::new(seed);
    let make = || {
        let table = DirTable::new(Arc::new(InMemory::new()), Path::from("t"));
        FaultyAdapter(FaultyTarget::seeded(table, next.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 4))
    };
    let settings = SuiteSettings { faults: TargetFaults::Own, ..settings(100, seed) };
    let report = run_conformance(make, &settings).await.unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.cases, settings.cases);
}

/// A target that breaks the contract twice: it appends every commit (no key exclusivity) and its probe always
/// says NotCommitted (a probe that does not know). The suite must catch it.
#[derive(Default)]
struct AppendOnlyLiar {
    landed: std::sync::Mutex<Vec<WriteResult>>,
}

#[async_trait::async_trait]
impl Target for AppendOnlyLiar {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        Ok(None)
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        self.landed.lock().unwrap().extend(commit.results.iter().cloned());
        CommitOutcome::Committed
    }

    async fn probe(&self, _key: &CommitKey, _prepared_version: Option<u64>) -> ProbeOutcome {
        ProbeOutcome::NotCommitted
    }
}

#[async_trait::async_trait]
impl Inspect for AppendOnlyLiar {
    async fn write_rows(&self, _checkpoint: &CheckpointId, rows: &[u64]) -> sinkpoint::Result<WriteResult> {
        Ok(rows_result(rows))
    }

    async fn landed_rows(&self) -> sinkpoint::Result<Vec<u64>> {
        Ok(self.landed.lock().unwrap().iter().flat_map(rows_of).collect())
    }
}

#[tokio::test]
async fn a_target_that_breaks_the_contract_fails_the_suite() {
    let failure = run_conformance(AppendOnlyLiar::default, &fixed(300, 4)).await.err();
    let failure = failure.expect("a target without key exclusivity and with lying probes must fail");
    println!("caught, as it should be: {failure}");
    assert!(failure.message.contains("landed"), "{failure}");
}

/// Every commit that landed: its key, ids and write results.
type Landed = std::sync::Mutex<Vec<(CommitKey, Vec<CheckpointId>, Vec<WriteResult>)>>;

/// A target that meets every guarantee but the first, key exclusivity: its probes are honest (they return the
/// ids of what landed under a key), but a commit lands whatever the table already holds under its key — it is
/// appended next to the earlier one, or overwrites it. Two writers of one job, or a zombie's late commit, put a
/// key into it twice.
struct NonExclusiveTable {
    overwrite: bool,
    landed: Landed,
}

impl NonExclusiveTable {
    fn appending() -> Self {
        Self { overwrite: false, landed: std::sync::Mutex::default() }
    }

    fn overwriting() -> Self {
        Self { overwrite: true, landed: std::sync::Mutex::default() }
    }
}

#[async_trait::async_trait]
impl Target for NonExclusiveTable {
    async fn version(&self) -> sinkpoint::Result<Option<u64>> {
        Ok(Some(self.landed.lock().unwrap().len() as u64))
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let mut landed = self.landed.lock().unwrap();
        if self.overwrite {
            landed.retain(|(key, _, _)| key != commit.key);
        }
        landed.push((commit.key.clone(), commit.ids.to_vec(), commit.results.to_vec()));
        CommitOutcome::Committed
    }

    async fn probe(&self, key: &CommitKey, _prepared_version: Option<u64>) -> ProbeOutcome {
        match self.landed.lock().unwrap().iter().find(|(k, _, _)| k == key) {
            Some((_, ids, _)) => ProbeOutcome::Committed { ids: Some(ids.clone()) },
            None => ProbeOutcome::NotCommitted,
        }
    }
}

#[async_trait::async_trait]
impl Inspect for NonExclusiveTable {
    async fn write_rows(&self, _checkpoint: &CheckpointId, rows: &[u64]) -> sinkpoint::Result<WriteResult> {
        Ok(rows_result(rows))
    }

    async fn landed_rows(&self) -> sinkpoint::Result<Vec<u64>> {
        let landed = self.landed.lock().unwrap();
        Ok(landed.iter().flat_map(|(_, _, results)| results.iter().flat_map(rows_of)).collect())
    }
}

/// Red-team finding 26: the suite never ran a second writer or a zombie, so a target lacking only key
/// exclusivity passed it. Both an appending and an overwriting one must fail.
#[tokio::test]
async fn a_target_without_key_exclusivity_fails_the_suite() {
    for (name, make) in
        [("appending", NonExclusiveTable::appending as fn() -> _), ("overwriting", NonExclusiveTable::overwriting)]
    {
        let failure = run_conformance(make, &fixed(100, 5)).await.err();
        let failure =
            failure.unwrap_or_else(|| panic!("the {name} table has no key exclusivity and must fail the suite"));
        println!("{name} table caught, as it should be: {failure}");
    }
}
