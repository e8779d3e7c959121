//! The conformance suite for [`Target`] adapters.
//!
//! **Not a stable part of the public API; may change in any release.**
//!
//! It runs, against fresh targets an adapter author supplies:
//! - **writer scenarios**: two writers of one job (each with its own store and epoch) racing on one key, and a
//!   zombie whose paused commit resumes after a newer writer committed its key. Exactly one commit per key may
//!   land: a writer told `Committed` for a key another writer landed, or a row landed twice, fails the suite;
//! - **random workloads** × target faults × crashes between any two steps and at the protocol's named crash
//!   points, checking after every step that no row reached the target twice, and at the end (once the target
//!   answers) that every sealed checkpoint's rows are in the target exactly once.
//!
//! The suite imposes no byte format on write results: the adapter's [`Inspect`] implementation writes the rows
//! the suite names and returns its own write result, and lists the row ids that landed. Faults come either from
//! the suite's [`FaultyTarget`] wrapper or from the adapter itself ([`TargetFaults`]).
//!
//! What keeps a zombie writer out of your table: fencing through the mirror refuses a stale writer at its next
//! call to the store, but it cannot stop a zombie that was paused in the middle of a commit (a GC pause, a
//! stalled request) and resumes after a newer writer committed. That late commit reaches the table, and only
//! the target's key exclusivity (guarantee 1 of [`Target`]: a second commit under a key is refused, and a
//! commit for key `n` is conditional on key `n - 1`) keeps it from landing twice. Implement it with the table's
//! own conditional create or compare-and-swap; a plain overwrite or append is not a conforming target, and the
//! writer scenarios fail it.

mod writers;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::DirTable;
use crate::commit::{Committer, CrashHook, Target, crash_points};
use crate::error::{Error, ErrorKind, Result};
use crate::store::Store;
use crate::testkit::{CrashBackend, FaultyTarget, HistoryTable, SplitMix64, WatermarkTable};
use crate::types::{CheckpointId, Format, JobId, TargetIdentity, WriteResult};
use crate::{Attempt, Part, StagePart};

/// Row ids each input writes: input i writes rows `i * ROWS_PER_INPUT ..`, so a row maps back to its input.
const ROWS_PER_INPUT: u64 = 2;

/// Calls of a writer, or of the final phase, made again while the target answers with a transient failure.
const ATTEMPTS_MAX: u32 = 16;

/// How long a writer waits at a scenario's gate for the other writer (a target call that never returns).
const GATE_WAIT_MS: u64 = 10_000;

/// What the suite needs of an adapter beyond [`Target`]: writing the rows it names, and listing what landed.
///
/// Neither call may fail under the faults the adapter injects into its own [`Target`] calls
/// ([`TargetFaults::Own`]): the suite treats their errors as failures of the adapter.
#[async_trait]
pub trait Inspect: Target {
    /// Writes `rows` (row ids unique in the job) for a worker of `checkpoint`, invisible until committed, and
    /// returns the write result the worker stages (a data file, a fragment). The suite may write one batch
    /// more than once (a retried task, two writers); each result must stand on its own.
    async fn write_rows(&self, checkpoint: &CheckpointId, rows: &[u64]) -> Result<WriteResult>;

    /// Every row id the table holds, once per time it landed (a duplicate commit shows its rows twice).
    async fn landed_rows(&self) -> Result<Vec<u64>>;
}

#[async_trait]
impl Inspect for DirTable {
    async fn write_rows(&self, checkpoint: &CheckpointId, rows: &[u64]) -> Result<WriteResult> {
        // A data file is written once: every write, a retried task's too, takes a name of its own.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let first = rows.first().copied().unwrap_or_default();
        let content: String = rows.iter().map(|r| format!("{r}\n")).collect();
        let name = format!("{checkpoint}-r{first}-n{}-w{write}", rows.len());
        self.write_data_file(&name, content.into_bytes()).await
    }

    async fn landed_rows(&self) -> Result<Vec<u64>> {
        self.rows().await?.iter().map(|line| parse_row(line, "dir table data file")).collect()
    }
}

#[async_trait]
impl Inspect for WatermarkTable {
    async fn write_rows(&self, _checkpoint: &CheckpointId, rows: &[u64]) -> Result<WriteResult> {
        rows_result(rows)
    }

    async fn landed_rows(&self) -> Result<Vec<u64>> {
        rows_of(&self.results(), "watermark table write result")
    }
}

#[async_trait]
impl Inspect for HistoryTable {
    async fn write_rows(&self, _checkpoint: &CheckpointId, rows: &[u64]) -> Result<WriteResult> {
        rows_result(rows)
    }

    async fn landed_rows(&self) -> Result<Vec<u64>> {
        rows_of(&self.results(), "history table write result")
    }
}

/// The in-memory tables' write result: the row ids as text, `1,2`.
fn rows_result(rows: &[u64]) -> Result<WriteResult> {
    let text = rows.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    WriteResult::new(Format::Other("rows".into()), text.into_bytes())
}

fn rows_of(results: &[WriteResult], place: &str) -> Result<Vec<u64>> {
    let mut rows = Vec::new();
    for result in results {
        let text =
            std::str::from_utf8(result.bytes()).map_err(|_| Error::corrupt(format!("a {place} is not UTF-8")))?;
        for row in text.split(',').filter(|r| !r.is_empty()) {
            rows.push(parse_row(row, place)?);
        }
    }
    Ok(rows)
}

fn parse_row(text: &str, place: &str) -> Result<u64> {
    text.parse().map_err(|_| Error::corrupt(format!("{place} holds {text:?}, not a row id")))
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

/// Where the target's faults come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetFaults {
    /// The suite wraps each target in a seeded [`FaultyTarget`] that faults one call in `one_in`; the final
    /// phase of a workload reaches the target without it.
    Injected {
        /// A fault on one call in this many (see [`FaultyTarget::seeded`]).
        one_in: u64,
    },
    /// The target is used as it is: the adapter brings its own faults (or none). They must be transient: the
    /// suite retries a call that failed with [`ErrorKind::Target`] up to 16 times in the final phase.
    Own,
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
    /// Where the target's faults come from.
    pub faults: TargetFaults,
}

impl Default for SuiteSettings {
    fn default() -> Self {
        Self { cases: 200, seed: 0x5EED, inputs_max: 6, steps_max: 14, faults: TargetFaults::Injected { one_in: 3 } }
    }
}

/// What a passing run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SuiteReport {
    /// Writer scenarios run (two writers racing on a key, a zombie's late commit).
    pub scenarios: u32,
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
    /// The case's steps (empty for a writer scenario).
    pub steps: Vec<Step>,
    /// What went wrong (a writer scenario's message starts with its name).
    pub message: String,
    /// The target calls, as the fault wrapper or the scenario logged them.
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

/// Runs the writer scenarios, then `settings.cases` random workloads, each against a fresh, empty target from
/// `make`. A failure names its seed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
///
/// use object_store::memory::InMemory;
/// use object_store::path::Path;
/// use sinkpoint::DirTable;
/// use sinkpoint::testkit::conformance::{SuiteSettings, TargetFaults, run_conformance};
///
/// // An adapter with faults of its own passes `TargetFaults::Own`; the default wraps the target in the
/// // suite's seeded `FaultyTarget`.
/// let make = || DirTable::new(Arc::new(InMemory::new()), Path::from("table"));
/// let settings = SuiteSettings { cases: 20, faults: TargetFaults::Own, ..SuiteSettings::default() };
/// let report = run_conformance(make, &settings).await.unwrap_or_else(|f| panic!("{f}"));
/// assert_eq!(report.cases, 20);
/// # }
/// ```
pub async fn run_conformance<T: Inspect, F: Fn() -> T>(
    make: F,
    settings: &SuiteSettings,
) -> std::result::Result<SuiteReport, SuiteFailure> {
    let mut report = SuiteReport { scenarios: writers::run_all(&make, settings.seed).await?, ..SuiteReport::default() };
    for case in 0..settings.cases {
        let seed = settings.seed.wrapping_add(u64::from(case));
        let (inputs, steps) = random_workload(seed, settings);
        report.crashes += run_case(make(), inputs, &steps, seed, settings.faults).await?;
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

fn input_rows(i: usize) -> Vec<u64> {
    let first = i as u64 * ROWS_PER_INPUT;
    (first..first + ROWS_PER_INPUT).collect()
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

/// A worker for input `i`: skips a processed input, restarts an orphan, writes its rows through the adapter,
/// stages the adapter's write result, seals.
async fn process<T: Inspect>(store: &Store, target: &T, i: usize) -> Result<()> {
    if store.is_processed(&input_key(i))? {
        return Ok(());
    }
    let id = input_id(i);
    let attempt = match store.get(&id)? {
        None => Attempt::FIRST,
        Some(info) if store.orphans().contains(&id) => {
            store.restart(&id).await?;
            info.attempt.next()
        }
        Some(info) => info.attempt,
    };
    let result = target.write_rows(&id, &input_rows(i)).await?;
    store.stage(&id, StagePart::new(attempt, Part::FIRST).keys(vec![input_key(i)]).results(vec![result])).await?;
    store.seal(&id, 1).await
}

/// Counts landed rows per input, checking that an input's rows land together; a count above 1 is a duplicate.
async fn landed_per_input<T: Inspect>(
    target: &T,
    inputs: usize,
) -> std::result::Result<BTreeMap<usize, usize>, String> {
    let mut rows: BTreeMap<u64, usize> = BTreeMap::new();
    for row in target.landed_rows().await.map_err(|e| format!("landed_rows: {e}"))? {
        *rows.entry(row).or_insert(0) += 1;
    }
    let mut counts = BTreeMap::new();
    for (&row, &count) in &rows {
        let i = (row / ROWS_PER_INPUT) as usize;
        if i >= inputs {
            return Err(format!("the target holds row {row}, which no input wrote"));
        }
        if input_rows(i).iter().any(|r| rows.get(r) != Some(&count)) {
            return Err(format!("input {i}'s rows landed unevenly: {rows:?} (a commit is not atomic)"));
        }
        counts.insert(i, count);
    }
    Ok(counts)
}

/// Fails if an input's rows landed more than once.
async fn check_no_duplicate<T: Inspect>(target: &T, inputs: usize, when: &str) -> std::result::Result<(), String> {
    match landed_per_input(target, inputs).await?.into_iter().find(|&(_, n)| n > 1) {
        Some((i, n)) => Err(format!("input {i} landed {n} times {when}")),
        None => Ok(()),
    }
}

/// Fails unless every input of `0..inputs` landed exactly once.
async fn check_exactly_once<T: Inspect>(target: &T, inputs: usize) -> std::result::Result<(), String> {
    let landed = landed_per_input(target, inputs).await?;
    let expected: BTreeMap<usize, usize> = (0..inputs).map(|i| (i, 1)).collect();
    if landed != expected {
        return Err(format!("landed per input {landed:?}, expected each of 0..{inputs} exactly once"));
    }
    Ok(())
}

/// Runs one workload against `target`, with faults from `faults`; returns how many crashes it recovered from.
/// This is also what `tests/suite/commit_props.rs` drives with proptest-generated workloads.
pub async fn run_case<T: Inspect>(
    target: T,
    inputs: usize,
    steps: &[Step],
    seed: u64,
    faults: TargetFaults,
) -> std::result::Result<u64, SuiteFailure> {
    let fail =
        |message: String, calls: Vec<String>| SuiteFailure { seed, inputs, steps: steps.to_vec(), message, calls };
    match faults {
        TargetFaults::Injected { one_in } => {
            let faulty = FaultyTarget::seeded(target, seed, one_in);
            drive(&faulty, faulty.inner(), inputs, steps).await.map_err(|m| fail(m, faulty.calls()))
        }
        TargetFaults::Own => drive(&target, &target, inputs, steps).await.map_err(|m| fail(m, Vec::new())),
    }
}

/// Runs `steps` with commits through `target` (the adapter, maybe wrapped) and rows read from `inspect` (the
/// adapter itself), then the final phase against `inspect` alone.
async fn drive<T: Inspect>(
    target: &dyn Target,
    inspect: &T,
    inputs: usize,
    steps: &[Step],
) -> std::result::Result<u64, String> {
    let e = |e: Error| e.to_string();
    let mut backend = CrashBackend::new();
    let mut store = open(&backend).await.map_err(e)?;
    let mut recovered = false;
    let mut crashes = 0;
    for step in steps {
        if !recovered {
            // Recovery first after every open; a fault may block it, which leaves work for later steps.
            recovered = Committer::new(&store, target).recover().await.is_ok();
        }
        match step {
            Step::Process(i) => process(&store, inspect, *i).await.map_err(e)?,
            Step::Commit { final_commit } => {
                if let Err(err) = Committer::new(&store, target).commit_or_finish(*final_commit).await
                    && err.kind() != ErrorKind::Target
                {
                    return Err(format!("commit_pending failed with {err} (only Target errors are expected)"));
                }
            }
            Step::CommitCrash { point } => {
                let point = crash_points::ALL.get(*point).copied().ok_or("no such crash point")?;
                let hook: CrashHook = Arc::new(move |at| at == point);
                let result = Committer::new(&store, target).with_crash_hook(hook).commit_pending().await;
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
        check_no_duplicate(inspect, inputs, &format!("after step {step:?}")).await?;
    }
    // The target becomes reachable and answers: the job finishes, and every sealed result is there once.
    store = reopen_after_crash(store, &mut backend).await.map_err(e)?;
    finish(&store, inspect, inspect, inputs).await?;
    check_exactly_once(inspect, inputs).await?;
    Ok(crashes + 1)
}

/// The final phase of one writer (commits through `target`, rows written by `writer`): recovers, processes every input, commits the last key final, and leaves
/// nothing pending. A call failing with [`ErrorKind::Target`] (an adapter's own transient fault) is retried.
async fn finish<T: Inspect>(
    store: &Store,
    target: &dyn Target,
    writer: &T,
    inputs: usize,
) -> std::result::Result<(), String> {
    let committer = Committer::new(store, target);
    retry("final recovery", || committer.recover()).await?;
    for i in 0..inputs {
        process(store, writer, i).await.map_err(|err| err.to_string())?;
    }
    retry("final commit", || committer.finish()).await?;
    if !store.pending().map_err(|err| err.to_string())?.checkpoints.is_empty() {
        return Err("checkpoints still pending after the final commit".into());
    }
    Ok(())
}

async fn retry<R, Fut: Future<Output = Result<R>>>(
    what: &str,
    mut call: impl FnMut() -> Fut,
) -> std::result::Result<R, String> {
    let mut attempt = 1;
    loop {
        match call().await {
            Ok(r) => return Ok(r),
            Err(err) if err.kind() == ErrorKind::Target && attempt < ATTEMPTS_MAX => attempt += 1,
            Err(err) => return Err(format!("{what}: {err}")),
        }
    }
}
