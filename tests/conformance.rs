//! Proves that the targets shipped with the crate pass the adapter conformance suite
//! (`testkit::conformance`): the reference `DirTable` on an in-memory store and in a local directory, and the
//! watermark table. The suite is what an adapter author runs against their own target.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use sinkpoint::target::DirTable;
use sinkpoint::testkit::WatermarkTable;
use sinkpoint::testkit::conformance::{Inspect, SuiteSettings, run_conformance};
use sinkpoint::{CommitKey, CommitOutcome, ProbeOutcome, Target, TargetCommit, WriteResult};

fn settings(cases: u32, seed: u64) -> SuiteSettings {
    let cases = std::env::var("SINKPOINT_CONFORMANCE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "conformance: {cases} cases from seed {seed} (SINKPOINT_CONFORMANCE_CASES to change)"
    );
    SuiteSettings { cases, seed, ..SuiteSettings::default() }
}

#[tokio::test]
async fn dir_table_in_memory_conforms() {
    let make = || DirTable::new(Arc::new(InMemory::new()), Path::from("t"));
    let report = run_conformance(make, &settings(300, 1)).await.unwrap_or_else(|f| panic!("{f}"));
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
    run_conformance(WatermarkTable::new, &settings(300, 3)).await.unwrap_or_else(|f| panic!("{f}"));
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
    async fn landed_results(&self) -> sinkpoint::Result<Vec<WriteResult>> {
        Ok(self.landed.lock().unwrap().clone())
    }
}

#[tokio::test]
async fn a_target_that_breaks_the_contract_fails_the_suite() {
    let failure = run_conformance(AppendOnlyLiar::default, &settings(300, 4)).await.err();
    let failure = failure.expect("a target without key exclusivity and with lying probes must fail");
    println!("caught, as it should be: {failure}");
    assert!(failure.message.contains("landed"), "{failure}");
}
