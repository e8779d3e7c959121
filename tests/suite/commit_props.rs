//! Proves, over random workloads × random target faults × crashes between any two steps and at the
//! protocol's named crash points, that after recovery every write result of every sealed checkpoint is in the
//! target exactly once, and that no step ever puts a write result into the table twice. The workloads come from
//! proptest (so a failure shrinks to a minimal case); each runs through the testkit's conformance case runner.
//!
//! Four shards (`commit_props::every_sealed_result_lands_exactly_once::shard_N_of_4`) that the test harness runs
//! in parallel. `SINKPOINT_CASES` sets the case count (default 1,000, split over the shards) and
//! `PROPTEST_RNG_SEED` the base seed (shard N starts from the base plus N - 1); both are printed at the start of
//! each shard, and the same two variables replay a run. A failure prints the minimal case and persists it under
//! `tests/suite/commit_props.proptest-regressions`.

use crate::common;

use common::{memory_table, sharded};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use sinkpoint::commit::crash_points;
use sinkpoint::testkit::conformance::{Step, TargetFaults, run_case};
use sinkpoint::testkit::{self, Shard};

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

/// The suite's cases when `SINKPOINT_CASES` is not set.
const CASES_DEFAULT: u64 = 1000;

sharded!(mod every_sealed_result_lands_exactly_once => run_shard);

fn run_shard(shard: Shard) {
    let cases = testkit::cases(CASES_DEFAULT);
    let base = testkit::seed("PROPTEST_RNG_SEED");
    shard.announce("commit protocol property", cases, "PROPTEST_RNG_SEED", base);
    let range = shard.range(cases);
    if range.is_empty() {
        return;
    }
    let config = ProptestConfig {
        rng_seed: RngSeed::Fixed(base.wrapping_add(u64::from(shard.index))),
        ..ProptestConfig::with_cases(u32::try_from(range.end - range.start).unwrap_or(u32::MAX))
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    proptest!(config, |((inputs, steps, seed) in workload())| {
        let faults = TargetFaults::Injected { one_in: 3 };
        let outcome = runtime.block_on(run_case(memory_table(), inputs, &steps, seed, faults));
        prop_assert!(outcome.is_ok(), "{}", outcome.err().map(|f| f.to_string()).unwrap_or_default());
    });
}
