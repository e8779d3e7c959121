//! The conformance suite for [`Target`] adapters: random workloads × random target faults × crashes between any
//! two steps and at the protocol's named crash points, checking after every step that no write result reached
//! the target twice, and at the end — once the target answers — that every sealed checkpoint's write result is
//! in the target exactly once.
//!
//! An adapter author implements [`Inspect`] for their target (how to list what landed) and calls
//! [`run_conformance`] from a test with a factory for fresh, empty targets:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use sinkpoint::testkit::conformance::{SuiteSettings, run_conformance};
//! use sinkpoint::testkit::WatermarkTable;
//!
//! let settings = SuiteSettings { cases: 20, ..SuiteSettings::default() };
//! let report = run_conformance(WatermarkTable::new, &settings).await.unwrap_or_else(|f| panic!("{f}"));
//! assert_eq!(report.cases, 20);
//! # }
//! ```
//!
//! What keeps a zombie writer out of your table: fencing through the mirror refuses a stale writer at its next
//! call to the store, but it cannot stop a zombie that was paused in the middle of a commit (a GC pause, a
//! stalled request) and resumes after a newer writer committed. That late commit reaches the table, and only
//! the target's key exclusivity (guarantee 1 of [`Target`]: a second commit under a key is refused, and a
//! commit for key `n` is conditional on key `n - 1`) keeps it from landing twice. Implement it with the table's
//! own conditional create or compare-and-swap; a plain overwrite or append is not a conforming target.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::commit::{Committer, CrashHook, Target, crash_points};
use crate::error::{ErrorKind, Result};
use crate::store::Store;
use crate::target::DirTable;
use crate::testkit::{CrashBackend, FaultyTarget, SplitMix64, WatermarkTable};
use crate::types::{CheckpointId, Format, JobId, TargetIdentity, WriteResult};

/// A target whose landed write results can be listed, so the suite can count them.
#[async_trait]
pub trait Inspect: Target {
    /// Every write result the target holds, once per time it landed (a duplicate commit shows twice).
    async fn landed_results(&self) -> Result<Vec<WriteResult>>;
}

#[async_trait]
impl Inspect for DirTable {
    async fn landed_results(&self) -> Result<Vec<WriteResult>> {
        let mut out = Vec::new();
        for commit in self.commits().await? {
            for file in commit.files {
                out.push(WriteResult::new(Format::Other("dir-table".into()), file.into_bytes())?);
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl Inspect for WatermarkTable {
    async fn landed_results(&self) -> Result<Vec<WriteResult>> {
        Ok(self.results())
    }
}

/// One step of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A worker processes input i: stages its key and one write result, seals (skipped when processed).
    Process(usize),
    /// The driver commits what is pending, final or not.
    Commit {
        /// Whether the last key is flagged final.
        final_commit: bool,
    },
    /// The driver commits and the process dies at the named crash point `crash_points::ALL[point]`.
    CommitCrash {
        /// The index into [`crash_points::ALL`].
        point: usize,
    },
    /// The process dies between two steps; the next writer opens the crash image and recovers.
    Crash,
}

/// The suite's settings: plain data.
#[derive(Clone, Debug)]
pub struct SuiteSettings {
    /// How many random workloads to run.
    pub cases: u32,
    /// The seed of the first case; case c uses `seed + c`, and a failure names its seed.
    pub seed: u64,
    /// The most inputs of one workload (at least 1).
    pub inputs_max: usize,
    /// The most steps of one workload (at least 1).
    pub steps_max: usize,
    /// A target fault on one call in this many (see [`FaultyTarget::seeded`]).
    pub fault_one_in: u64,
}

impl Default for SuiteSettings {
    fn default() -> Self {
        Self { cases: 200, seed: 0x5EED, inputs_max: 6, steps_max: 14, fault_one_in: 3 }
    }
}

/// What a passing run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SuiteReport {
    /// Workloads run.
    pub cases: u32,
    /// Steps run, over all workloads.
    pub steps: u64,
    /// Crashes (between steps and at named points) recovered from.
    pub crashes: u64,
}

/// A failing case: everything needed to replay it.
#[derive(Clone, Debug)]
pub struct SuiteFailure {
    /// The case's seed (replay with `SuiteSettings { cases: 1, seed, .. }`).
    pub seed: u64,
    /// The case's inputs.
    pub inputs: usize,
    /// The case's steps.
    pub steps: Vec<Step>,
    /// What went wrong.
    pub message: String,
    /// The faulty target's log of calls.
    pub calls: Vec<String>,
}

impl fmt::Display for SuiteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conformance case with seed {} failed: {}\n  inputs {}, steps {:?}\n  target calls {:?}",
            self.seed, self.message, self.inputs, self.steps, self.calls
        )
    }
}

/// Runs `settings.cases` random workloads against fresh targets from `make`. Each case's seed is printed in a
/// failure.
pub async fn run_conformance<T: Inspect, F: Fn() -> T>(
    make: F,
    settings: &SuiteSettings,
) -> std::result::Result<SuiteReport, SuiteFailure> {
    let mut report = SuiteReport::default();
    for case in 0..settings.cases {
        let seed = settings.seed.wrapping_add(u64::from(case));
        let (inputs, steps) = random_workload(seed, settings);
        report.crashes += run_case(make(), inputs, &steps, seed, settings.fault_one_in).await?;
        report.steps += steps.len() as u64;
        report.cases += 1;
    }
    Ok(report)
}

fn random_workload(seed: u64, settings: &SuiteSettings) -> (usize, Vec<Step>) {
    let mut rng = SplitMix64::new(seed);
    let inputs = 1 + rng.below(settings.inputs_max.max(1) as u64) as usize;
    let len = 1 + rng.below(settings.steps_max.max(1) as u64) as usize;
    let steps = (0..len)
        .map(|_| match rng.below(8) {
            0..4 => Step::Process(rng.below(inputs as u64) as usize),
            4 | 5 => Step::Commit { final_commit: rng.below(2) == 0 },
            6 => Step::CommitCrash { point: rng.below(crash_points::ALL.len() as u64) as usize },
            _ => Step::Crash,
        })
        .collect();
    (inputs, steps)
}

fn job() -> JobId {
    JobId::new("conformance").unwrap_or_else(|_| unreachable!("a valid literal id"))
}

fn input_id(i: usize) -> CheckpointId {
    CheckpointId::new(format!("input-{i:04}")).unwrap_or_else(|_| unreachable!("a valid id"))
}

fn input_key(i: usize) -> Vec<u8> {
    format!("source://input/{i:04}").into_bytes()
}

/// The input a write result belongs to: results are named `input-{i}-e{epoch}-a{attempt}`.
fn input_of(result: &WriteResult) -> Option<usize> {
    let name = std::str::from_utf8(result.bytes()).ok()?;
    name.strip_prefix("input-")?.split('-').next()?.parse().ok()
}

async fn open(backend: &CrashBackend) -> Result<Store> {
    let target = TargetIdentity::new("conformance://target")?;
    Store::builder(job(), target).backend(backend.clone()).open().await
}

async fn reopen_after_crash(store: Store, backend: &mut CrashBackend) -> Result<Store> {
    // A crash, not a clean shutdown: the old backend dies first, so nothing more reaches its durable image.
    backend.kill();
    drop(store);
    *backend = backend.crash_image();
    open(backend).await
}

/// A worker for input `i`: skips a processed input, restarts an orphan, stages one result, seals.
async fn process(store: &Store, i: usize) -> Result<()> {
    if store.is_processed(&input_key(i))? {
        return Ok(());
    }
    let id = input_id(i);
    let attempt = match store.get(&id)? {
        None => 0,
        Some(info) if store.orphans().contains(&id) => {
            store.restart(&id).await?;
            info.attempt + 1
        }
        Some(info) => info.attempt,
    };
    let name = format!("input-{i:04}-e{}-a{attempt}", store.epoch());
    let result = WriteResult::new(Format::Other("dir-table".into()), name.into_bytes())?;
    store.stage(&id, attempt, 0, vec![input_key(i)], vec![result]).await?;
    store.seal(&id, 1).await
}

/// Counts landed results per input; a second result for one input is a duplicate row.
async fn landed_per_input<T: Inspect>(target: &T) -> std::result::Result<BTreeMap<usize, usize>, String> {
    let mut counts = BTreeMap::new();
    for result in target.landed_results().await.map_err(|e| e.to_string())? {
        let i = input_of(&result).ok_or_else(|| format!("the target holds a foreign result {result:?}"))?;
        *counts.entry(i).or_insert(0) += 1;
    }
    Ok(counts)
}

/// Runs one workload against `target` (wrapped in a seeded [`FaultyTarget`]); returns how many crashes it
/// recovered from. This is also what `tests/commit_props.rs` drives with proptest-generated workloads.
pub async fn run_case<T: Inspect>(
    target: T,
    inputs: usize,
    steps: &[Step],
    seed: u64,
    fault_one_in: u64,
) -> std::result::Result<u64, SuiteFailure> {
    let faulty = FaultyTarget::seeded(target, seed, fault_one_in);
    let fail = |message: String, faulty: &FaultyTarget<T>| SuiteFailure {
        seed,
        inputs,
        steps: steps.to_vec(),
        message,
        calls: faulty.calls(),
    };
    match drive(&faulty, inputs, steps).await {
        Ok(crashes) => Ok(crashes),
        Err(message) => Err(fail(message, &faulty)),
    }
}

async fn drive<T: Inspect>(
    faulty: &FaultyTarget<T>,
    inputs: usize,
    steps: &[Step],
) -> std::result::Result<u64, String> {
    let e = |e: crate::Error| e.to_string();
    let mut backend = CrashBackend::new();
    let mut store = open(&backend).await.map_err(e)?;
    let mut recovered = false;
    let mut crashes = 0;
    for step in steps {
        if !recovered {
            // Recovery first after every open; a fault may block it, which leaves work for later steps.
            recovered = Committer::new(&store, faulty).recover().await.is_ok();
        }
        match step {
            Step::Process(i) => process(&store, *i).await.map_err(e)?,
            Step::Commit { final_commit } => {
                if let Err(err) = Committer::new(&store, faulty).commit_pending(*final_commit).await
                    && err.kind() != ErrorKind::Target
                {
                    return Err(format!("commit_pending failed with {err} (only Target errors are expected)"));
                }
            }
            Step::CommitCrash { point } => {
                let point = crash_points::ALL.get(*point).copied().ok_or("no such crash point")?;
                let hook: CrashHook = Arc::new(move |at| at == point);
                let result = Committer::new(&store, faulty).with_crash_hook(hook).commit_pending(false).await;
                if matches!(&result, Err(err) if err.kind() == ErrorKind::Poisoned) {
                    store = reopen_after_crash(store, &mut backend).await.map_err(e)?;
                    recovered = false;
                    crashes += 1;
                }
            }
            Step::Crash => {
                store = reopen_after_crash(store, &mut backend).await.map_err(e)?;
                recovered = false;
                crashes += 1;
            }
        }
        if let Some((i, n)) = landed_per_input(faulty.inner()).await?.into_iter().find(|&(_, n)| n > 1) {
            return Err(format!("input {i} landed {n} times after step {step:?}"));
        }
    }
    // The target becomes reachable and answers: the job finishes, and every sealed result is there once.
    store = reopen_after_crash(store, &mut backend).await.map_err(e)?;
    let target = faulty.inner();
    Committer::new(&store, target).recover().await.map_err(|err| format!("final recovery: {err}"))?;
    for i in 0..inputs {
        process(&store, i).await.map_err(e)?;
    }
    Committer::new(&store, target).commit_pending(true).await.map_err(|err| format!("final commit: {err}"))?;
    let landed = landed_per_input(target).await?;
    let expected: BTreeMap<usize, usize> = (0..inputs).map(|i| (i, 1)).collect();
    if landed != expected {
        return Err(format!("landed per input {landed:?}, expected each of 0..{inputs} exactly once"));
    }
    if !store.pending().map_err(e)?.checkpoints.is_empty() {
        return Err("checkpoints still pending after the final commit".into());
    }
    Ok(crashes + 1)
}
