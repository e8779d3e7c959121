//! The writer scenarios: more than one writer of a job reaching one target. Fencing cannot keep them apart at
//! the table (a zombie paused mid-commit resumes whatever the mirror says), so only the target's key
//! exclusivity can; these scenarios are what fails a target without it.
//!
//! - **race**: two writers, each with its own store and epoch, both begin key n from the same sealed set, and
//!   both send it at the same moment;
//! - **zombie**: a writer paused inside its commit of key n while a newer writer opens from its state, commits
//!   key n and the next, and finishes; then the zombie's commit goes out;
//! - **late zombie**: the same zombie's commit goes out between the newer writer's probe of key n (not landed)
//!   and its re-send: the newer writer must take the landed commit of its own intent for what it is (F1), and
//!   finish;
//! - **two drivers**: two stores of one job without a mirror; the second probes key n (not there), the first
//!   commits it, then the second begins it: the second must be refused, not land the key again.
//!
//! Each runs with 0 and 1 keys committed before. Exactly one commit per key may land: the target may answer
//! `Committed` for a key to one writer (epoch) only, and no row may land twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{Barrier, Notify};

use super::{
    ATTEMPTS_MAX, GATE_WAIT_MS, Inspect, SuiteFailure, check_exactly_once, check_no_duplicate, finish, open, process,
    retry,
};
use crate::commit::{CommitOutcome, CommitReport, Committer, ProbeOutcome, Target, TargetCommit};
use crate::error::{ErrorKind, Result};
use crate::store::Store;
use crate::testkit::CrashBackend;
use crate::types::{CommitKey, Epoch};

/// The sealed set both writers commit has this many inputs.
const RACING_INPUTS: usize = 2;

#[derive(Clone, Copy, Debug)]
enum Scenario {
    Race,
    Zombie,
    LateZombie,
    TwoDrivers,
}

/// Runs every scenario against a fresh target from `make`; returns how many ran.
pub(super) async fn run_all<T: Inspect, F: Fn() -> T>(make: &F, seed: u64) -> std::result::Result<u32, SuiteFailure> {
    let mut ran = 0;
    for keys_before in [0, 1] {
        for scenario in ALL {
            let log = Log::default();
            let (inputs, outcome) = run(scenario, &make(), &log, keys_before).await;
            // The answers the writers got name the broken guarantee best, so they are checked first.
            if let Err(message) = log.check_exclusive().and(outcome) {
                let message = format!("{scenario:?} scenario with {keys_before} keys before: {message}");
                return Err(SuiteFailure { seed, inputs, steps: Vec::new(), message, calls: log.calls() });
            }
            ran += 1;
        }
    }
    Ok(ran)
}

/// Every scenario, in the order the suite runs them.
const ALL: [Scenario; 4] = [Scenario::Race, Scenario::Zombie, Scenario::LateZombie, Scenario::TwoDrivers];

/// Runs one scenario; returns its number of inputs and what it found.
async fn run<T: Inspect>(
    scenario: Scenario,
    target: &T,
    log: &Log,
    keys_before: usize,
) -> (usize, std::result::Result<(), String>) {
    match scenario {
        Scenario::Race => (keys_before + RACING_INPUTS, race(target, log, keys_before).await),
        Scenario::Zombie => (keys_before + RACING_INPUTS + 1, zombie(target, log, keys_before).await),
        Scenario::LateZombie => (keys_before + RACING_INPUTS + 1, late_zombie(target, log, keys_before).await),
        Scenario::TwoDrivers => (keys_before + RACING_INPUTS, two_drivers(target, log, keys_before).await),
    }
}

/// Two writers begin key n from the same sealed set and send it at once; one is refused, the other finishes.
async fn race<T: Inspect>(target: &T, log: &Log, keys_before: usize) -> std::result::Result<(), String> {
    let inputs = keys_before + RACING_INPUTS;
    let image = prepare(target, log, keys_before, inputs).await?;
    let first = open(&image).await.map_err(|e| e.to_string())?;
    let second = open(&image.crash_image()).await.map_err(|e| e.to_string())?;
    let barrier = Arc::new(Barrier::new(2));
    let first_view = View::new(target, log, Gate::Race(barrier.clone()));
    let second_view = View::new(target, log, Gate::Race(barrier));
    let (a, b) = tokio::join!(commit_until_sent(&first, &first_view), commit_until_sent(&second, &second_view));
    log.note(format!("the race: first writer {a:?}, second writer {b:?}"));
    check_no_duplicate(target, inputs, "after two writers sent one key").await?;
    let a = finish(&first, &first_view, target, inputs).await;
    let b = finish(&second, &second_view, target, inputs).await;
    if let (Err(a), Err(b)) = (&a, &b) {
        return Err(format!("neither writer finished: {a}; {b}"));
    }
    check_exactly_once(target, inputs).await
}

/// A zombie paused inside its commit of key n; a newer writer commits n, then the rest, and finishes; then the
/// zombie's commit goes out.
async fn zombie<T: Inspect>(target: &T, log: &Log, keys_before: usize) -> std::result::Result<(), String> {
    let inputs = keys_before + RACING_INPUTS + 1;
    let image = prepare(target, log, keys_before, inputs - 1).await?;
    let zombie = open(&image).await.map_err(|e| e.to_string())?;
    let (reached, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let zombie_view = View::new(target, log, Gate::Pause { reached: reached.clone(), release: release.clone() });
    let newer_view = View::new(target, log, Gate::None);
    let newer = async {
        // A zombie that never gets to its commit leaves the newer writer alone after the wait.
        let _ = tokio::time::timeout(Duration::from_millis(GATE_WAIT_MS), reached.notified()).await;
        // The zombie's intent is durable (and would be in the mirror): the newer writer opens from it.
        let finished = match open(&image.crash_image()).await {
            Ok(newer) => finish(&newer, &newer_view, target, inputs).await,
            Err(e) => Err(e.to_string()),
        };
        release.notify_one();
        finished
    };
    let (late, finished) = tokio::join!(commit_until_sent(&zombie, &zombie_view), newer);
    log.note(format!("the zombie's late commit: {late:?}"));
    finished?;
    check_exactly_once(target, inputs).await
}

/// A zombie paused inside its commit of key n; a newer writer opens from its intent, probes key n (not landed)
/// and re-sends it, and the zombie's commit goes out just before that re-send reaches the target. The newer
/// writer's re-send is refused (the key is taken), and what holds the key is the intent it replayed: it must
/// mark it committed and finish, not take it for another writer's.
async fn late_zombie<T: Inspect>(target: &T, log: &Log, keys_before: usize) -> std::result::Result<(), String> {
    let inputs = keys_before + RACING_INPUTS + 1;
    let image = prepare(target, log, keys_before, inputs - 1).await?;
    let zombie = open(&image).await.map_err(|e| e.to_string())?;
    let (reached, release, landed) = (Arc::new(Notify::new()), Arc::new(Notify::new()), Arc::new(Notify::new()));
    let mut zombie_view = View::new(target, log, Gate::Pause { reached: reached.clone(), release: release.clone() });
    zombie_view.after_commit = Some(landed.clone());
    let newer_view = View::new(target, log, Gate::ReleaseFirst { release, landed });
    let newer = async {
        let _ = tokio::time::timeout(Duration::from_millis(GATE_WAIT_MS), reached.notified()).await;
        match open(&image.crash_image()).await {
            Ok(newer) => finish(&newer, &newer_view, target, inputs).await,
            Err(e) => Err(e.to_string()),
        }
    };
    let (late, finished) = tokio::join!(commit_until_sent(&zombie, &zombie_view), newer);
    log.note(format!("the zombie's commit, sent before the newer writer's re-send: {late:?}"));
    finished.map_err(|e| format!("the newer writer did not finish: {e}"))?;
    check_exactly_once(target, inputs).await
}

/// Two stores of one job without a mirror (the second of a later epoch), both with every input sealed. The
/// second begins to commit: right after its probe finds key n absent, the first commits everything and
/// finishes; then the second begins key n. The target holds n since the second's probe, so the second must be
/// refused, not land the key again.
async fn two_drivers<T: Inspect>(target: &T, log: &Log, keys_before: usize) -> std::result::Result<(), String> {
    let inputs = keys_before + RACING_INPUTS;
    let image = prepare(target, log, keys_before, keys_before).await?;
    let (first_backend, second_backend) = (image.crash_image(), image.crash_image());
    // One open more, so that the second driver's epoch is above the first's: the target tells them apart.
    drop(open(&second_backend).await.map_err(|e| e.to_string())?);
    let second = open(&second_backend).await.map_err(|e| e.to_string())?;
    for i in 0..inputs {
        process(&second, target, i).await.map_err(|e| e.to_string())?;
    }
    let (probed, go_on) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let mut second_view = View::new(target, log, Gate::None);
    second_view.after_probe = Some((probed.clone(), go_on.clone()));
    let first = async {
        let _ = tokio::time::timeout(Duration::from_millis(GATE_WAIT_MS), probed.notified()).await;
        let finished = match open(&first_backend).await {
            Ok(first) => finish(&first, &View::new(target, log, Gate::None), target, inputs).await,
            Err(e) => Err(e.to_string()),
        };
        go_on.notify_one();
        finished
    };
    let committer = Committer::new(&second, &second_view);
    let (late, finished) = tokio::join!(committer.commit_pending(), first);
    log.note(format!("the second driver, its probe before the first driver's commits: {late:?}"));
    finished.map_err(|e| format!("the first driver did not finish: {e}"))?;
    check_no_duplicate(target, inputs, "after the second driver's commit").await?;
    check_exactly_once(target, inputs).await
}

/// A first writer commits `keys_before` keys of one input each, then seals inputs `keys_before..inputs` and dies;
/// returns its crash image.
async fn prepare<T: Inspect>(
    target: &T,
    log: &Log,
    keys_before: usize,
    inputs: usize,
) -> std::result::Result<CrashBackend, String> {
    let backend = CrashBackend::new();
    let store = open(&backend).await.map_err(|e| e.to_string())?;
    let view = View::new(target, log, Gate::None);
    let committer = Committer::new(&store, &view);
    for i in 0..inputs {
        process(&store, target, i).await.map_err(|e| e.to_string())?;
        if i < keys_before {
            retry("a key before the scenario", || committer.commit_pending()).await?;
        }
    }
    backend.kill();
    drop(committer);
    drop(store);
    Ok(backend.crash_image())
}

/// Commits what is pending, again while a transient target failure keeps the writer from reaching its gate.
async fn commit_until_sent<T: Target>(store: &Store, view: &View<'_, T>) -> Result<CommitReport> {
    let committer = Committer::new(store, view);
    let mut result = committer.commit_pending().await;
    for _ in 1..ATTEMPTS_MAX {
        let transient = matches!(&result, Err(e) if e.kind() == ErrorKind::Target);
        if !transient || !view.armed.load(Ordering::SeqCst) {
            break;
        }
        result = committer.commit_pending().await;
    }
    result
}

/// How a writer's first commit call is held.
enum Gate {
    /// No hold.
    None,
    /// Until every writer of the race reached its commit.
    Race(Arc<Barrier>),
    /// Until released; `reached` tells the driver the writer is paused.
    Pause { reached: Arc<Notify>, release: Arc<Notify> },
    /// Releases a paused writer, and goes on once its commit is answered (`landed`).
    ReleaseFirst { release: Arc<Notify>, landed: Arc<Notify> },
}

/// Every target call of a scenario, and which writers (epochs) the target told a key landed.
#[derive(Default)]
struct Log {
    calls: Mutex<Vec<String>>,
    committed: Mutex<BTreeMap<u64, BTreeSet<Epoch>>>,
}

impl Log {
    fn note(&self, line: String) {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn commit(&self, commit: &TargetCommit<'_>, outcome: &CommitOutcome) {
        self.note(format!("epoch {} commits key {}: {outcome:?}", commit.epoch, commit.key.n));
        if *outcome == CommitOutcome::Committed {
            let mut committed = self.committed.lock().unwrap_or_else(|e| e.into_inner());
            committed.entry(commit.key.n).or_default().insert(commit.epoch);
        }
    }

    /// A key the target said landed for two writers landed twice (or the target lied to one of them).
    fn check_exclusive(&self) -> std::result::Result<(), String> {
        let committed = self.committed.lock().unwrap_or_else(|e| e.into_inner());
        match committed.iter().find(|(_, epochs)| epochs.len() > 1) {
            Some((n, epochs)) => Err(format!(
                "the target answered Committed for key {n} to the writers of epochs {epochs:?}: a key landed \
                 twice (the target lacks key exclusivity, guarantee 1 of Target)"
            )),
            None => Ok(()),
        }
    }
}

/// One writer's view of the shared target: holds its first commit at the gate and logs every answer.
struct View<'t, T> {
    target: &'t T,
    log: &'t Log,
    gate: Gate,
    armed: AtomicBool,
    /// Told once the first commit through this view is answered.
    after_commit: Option<Arc<Notify>>,
    /// After the first probe through this view: tells the first, waits for the second.
    after_probe: Option<(Arc<Notify>, Arc<Notify>)>,
    probe_armed: AtomicBool,
}

impl<'t, T: Target> View<'t, T> {
    fn new(target: &'t T, log: &'t Log, gate: Gate) -> Self {
        let probe_armed = AtomicBool::new(true);
        Self { target, log, gate, armed: AtomicBool::new(true), after_commit: None, after_probe: None, probe_armed }
    }

    async fn hold(&self) {
        let wait = async {
            match &self.gate {
                Gate::None => {}
                Gate::Race(barrier) => {
                    barrier.wait().await;
                }
                Gate::Pause { reached, release } => {
                    reached.notify_one();
                    release.notified().await;
                }
                Gate::ReleaseFirst { release, landed } => {
                    release.notify_one();
                    landed.notified().await;
                }
            }
        };
        // A peer that never arrives (its earlier call failed) must not hang the suite: go on alone.
        let _ = tokio::time::timeout(Duration::from_millis(GATE_WAIT_MS), wait).await;
    }
}

#[async_trait]
impl<T: Target> Target for View<'_, T> {
    async fn version(&self) -> Result<Option<u64>> {
        self.target.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let first = self.armed.swap(false, Ordering::SeqCst);
        if first {
            self.hold().await;
        }
        let outcome = self.target.commit(commit).await;
        self.log.commit(commit, &outcome);
        if let (true, Some(after)) = (first, &self.after_commit) {
            after.notify_one();
        }
        outcome
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        let outcome = self.target.probe(key, prepared_version).await;
        self.log.note(format!("probe key {}: {outcome:?}", key.n));
        if let Some((probed, go_on)) = &self.after_probe
            && self.probe_armed.swap(false, Ordering::SeqCst)
        {
            probed.notify_one();
            let _ = tokio::time::timeout(Duration::from_millis(GATE_WAIT_MS), go_on.notified()).await;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::path::Path;

    use super::*;
    use crate::DirTable;
    use crate::testkit::WatermarkTable;
    use crate::types::{CheckpointId, Format, WriteResult};

    /// Every commit that landed: its key, ids and write results.
    type Landed = Mutex<Vec<(CommitKey, Vec<CheckpointId>, Vec<WriteResult>)>>;

    /// Honest probes, atomic commits, no key exclusivity: a commit lands beside (or over) the key's earlier one.
    struct Loose {
        overwrite: bool,
        landed: Landed,
    }

    #[async_trait]
    impl Target for Loose {
        async fn version(&self) -> Result<Option<u64>> {
            Ok(None)
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

    #[async_trait]
    impl Inspect for Loose {
        async fn write_rows(&self, _checkpoint: &CheckpointId, rows: &[u64]) -> Result<WriteResult> {
            WriteResult::new(
                Format::Other("rows".into()),
                rows.iter().map(|r| r.to_le_bytes()).collect::<Vec<_>>().concat(),
            )
        }

        async fn landed_rows(&self) -> Result<Vec<u64>> {
            let landed = self.landed.lock().unwrap();
            let bytes = landed.iter().flat_map(|(_, _, results)| results.iter().flat_map(|r| r.bytes().to_vec()));
            let bytes: Vec<u8> = bytes.collect();
            Ok(bytes.chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect())
        }
    }

    #[tokio::test]
    async fn each_scenario_alone_fails_a_target_without_key_exclusivity() {
        for overwrite in [false, true] {
            for scenario in ALL {
                for keys_before in [0, 1] {
                    let (log, target) = (Log::default(), Loose { overwrite, landed: Mutex::default() });
                    let (_, outcome) = run(scenario, &target, &log, keys_before).await;
                    let outcome = log.check_exclusive().and(outcome);
                    assert!(outcome.is_err(), "{scenario:?}, {keys_before} keys before, overwrite {overwrite}");
                }
            }
        }
    }

    /// The writers whose commit of key `n` reached the target, whatever it answered.
    fn senders(log: &Log, n: u64) -> BTreeSet<String> {
        let commits = format!(" commits key {n}:");
        log.calls()
            .iter()
            .filter(|c| c.contains(&commits))
            .filter_map(|c| c.split(' ').nth(1).map(String::from))
            .collect()
    }

    /// The scenarios are not vacuous: in each, two writers' commits of one key reach a conforming target, which
    /// lets one land and refuses the other.
    #[tokio::test]
    async fn in_each_scenario_two_writers_send_one_key_and_a_conforming_target_passes() {
        for scenario in ALL {
            for keys_before in [0, 1] {
                let log = Log::default();
                let table = DirTable::new(Arc::new(InMemory::new()), Path::from("t"));
                let (_, outcome) = run(scenario, &table, &log, keys_before).await;
                assert!(log.check_exclusive().and(outcome).is_ok(), "{scenario:?}: {:?}", log.calls());
                assert_eq!(senders(&log, keys_before as u64).len(), 2, "{scenario:?}: {:?}", log.calls());
                let log = Log::default();
                let (_, outcome) = run(scenario, &WatermarkTable::new(), &log, keys_before).await;
                assert!(log.check_exclusive().and(outcome).is_ok(), "{scenario:?}: {:?}", log.calls());
                assert_eq!(senders(&log, keys_before as u64).len(), 2, "{scenario:?}: {:?}", log.calls());
            }
        }
    }
}
