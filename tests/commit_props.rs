//! Proves, over random workloads × random target faults × crashes between any two steps and at the
//! protocol's named crash points, that after recovery every write result of every sealed checkpoint is in the
//! target exactly once, and that no step ever puts a row into the table twice.
//!
//! Cases: `PROPTEST_CASES` (default 1,000). A failure prints the minimal case and proptest's seed.

mod common;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use sinkpoint::commit::{Committer, CrashHook, crash_points};
use sinkpoint::testkit::{CrashBackend, FaultyTarget};
use sinkpoint::{ErrorKind, Store};

#[derive(Clone, Debug)]
enum Step {
    /// A worker processes input i (skipped when already processed).
    Process(usize),
    /// The driver commits what is pending, final or not.
    Commit { final_commit: bool },
    /// The driver commits and the process dies at a named crash point, if it gets there.
    CommitCrash { point: usize },
    /// The process dies between two steps; the next writer opens the crash image and recovers.
    Crash,
}

fn step(inputs: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..inputs).prop_map(Step::Process),
        2 => any::<bool>().prop_map(|final_commit| Step::Commit { final_commit }),
        1 => (0..crash_points::ALL.len()).prop_map(|point| Step::CommitCrash { point }),
        1 => Just(Step::Crash),
    ]
}

fn workload() -> impl Strategy<Value = (usize, Vec<Step>, u64)> {
    (1usize..6).prop_flat_map(|inputs| (Just(inputs), prop::collection::vec(step(inputs), 1..14), any::<u64>()))
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

async fn reopen_after_crash(store: Store, backend: &mut CrashBackend) -> Store {
    // A crash, not a clean shutdown: the old backend dies first, so nothing more reaches its durable image.
    backend.kill();
    drop(store);
    *backend = backend.crash_image();
    open(backend).await
}

async fn run_case(inputs: usize, steps: &[Step], seed: u64) -> Result<(), TestCaseError> {
    let mut backend = CrashBackend::new();
    let target = FaultyTarget::seeded(memory_table(), seed, 3);
    let table = target.inner();
    let mut store = open(&backend).await;
    let mut recovered = false;
    for step in steps {
        if !recovered {
            // Recovery first after every open; a fault may block it, which leaves work for later steps.
            recovered = Committer::new(&store, &target).recover().await.is_ok();
        }
        match step {
            Step::Process(i) => process(&store, table, *i).await,
            Step::Commit { final_commit } => {
                if let Err(e) = Committer::new(&store, &target).commit_pending(*final_commit).await {
                    prop_assert!(matches!(e.kind(), ErrorKind::Target | ErrorKind::CommitMismatch), "{e}");
                    prop_assert_ne!(e.kind(), ErrorKind::CommitMismatch, "a mismatch cannot happen with one writer");
                }
            }
            Step::CommitCrash { point } => {
                let point = crash_points::ALL[*point];
                let hook: CrashHook = Arc::new(move |at| at == point);
                let result = Committer::new(&store, &target).with_crash_hook(hook).commit_pending(false).await;
                if matches!(&result, Err(e) if e.kind() == ErrorKind::Poisoned) {
                    store = reopen_after_crash(store, &mut backend).await;
                    recovered = false;
                }
            }
            Step::Crash => {
                store = reopen_after_crash(store, &mut backend).await;
                recovered = false;
            }
        }
        let now = account(table, inputs).await;
        prop_assert_eq!(now.duplicates, 0, "a row landed twice after {:?}; target calls {:?}", step, target.calls());
    }
    // The target becomes reachable and answers: the job finishes, and every sealed result is there once.
    store = reopen_after_crash(store, &mut backend).await;
    let report = Committer::new(&store, table).recover().await;
    prop_assert!(report.is_ok(), "{:?}; target calls {:?}", report, target.calls());
    for i in 0..inputs {
        process(&store, table, i).await;
    }
    Committer::new(&store, table).commit_pending(true).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(account(table, inputs).await, exactly_once(inputs), "target calls {:?}", target.calls());
    prop_assert!(store.pending().map_err(|e| TestCaseError::fail(e.to_string()))?.checkpoints.is_empty());
    Ok(())
}

#[test]
fn every_sealed_result_lands_exactly_once() {
    let config = ProptestConfig::with_cases(cases());
    println!(
        "commit protocol property: {} cases (PROPTEST_CASES to change); failures persist under proptest-regressions/",
        config.cases
    );
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    proptest!(config, |((inputs, steps, seed) in workload())| {
        runtime.block_on(run_case(inputs, &steps, seed))?;
    });
}
