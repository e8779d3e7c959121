//! Proves, over random workloads × random target faults × crashes between any two steps and at the
//! protocol's named crash points, that after recovery every write result of every sealed checkpoint is in the
//! target exactly once, and that no step ever puts a write result into the table twice. The workloads come from
//! proptest (so a failure shrinks to a minimal case); each runs through the testkit's conformance case runner.
//!
//! Cases: `PROPTEST_CASES` (default 1,000). A failure prints the minimal case and proptest's seed.

use crate::common;

use common::memory_table;
use proptest::prelude::*;
use sinkpoint::commit::crash_points;
use sinkpoint::testkit::conformance::{Step, TargetFaults, run_case};

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

#[test]
fn every_sealed_result_lands_exactly_once() {
    let config = ProptestConfig::with_cases(cases());
    // Straight to stderr, past the test harness's capture, so that a passing run shows the count too.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "commit protocol property: {} cases (PROPTEST_CASES to change); failures persist under tests/suite/*.proptest-regressions",
        config.cases
    );
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    proptest!(config, |((inputs, steps, seed) in workload())| {
        let outcome = runtime.block_on(run_case(memory_table(), inputs, &steps, seed, TargetFaults::Injected { one_in: 3 }));
        prop_assert!(outcome.is_ok(), "{}", outcome.err().map(|f| f.to_string()).unwrap_or_default());
    });
}
