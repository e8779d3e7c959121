//! Target doubles for tests: a fault-injecting wrapper for any [`Target`], a watermark target that answers
//! probes like Delta's `txn` ("version ≥ n"), and a history target that checks a key only in the versions since
//! the commit was prepared, as a Lance or Iceberg adapter reading the table's log does.

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::commit::{CommitOutcome, ProbeOutcome, Target, TargetCommit};
use crate::error::Result;
use crate::testkit::rng::SplitMix64;
use crate::types::{CheckpointId, CommitKey, Epoch, WriteResult};

/// What the wrapper does to one commit call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CommitFault {
    /// Pass the call through.
    Pass,
    /// Fail before the inner target is called: `NotLanded`.
    FailBeforeCommit,
    /// Land the commit in the inner target, then lose the ack: `Unknown`.
    LandThenLoseAck,
    /// Answer `Unknown` without landing anything.
    UnknownNotLanded,
    /// Answer `Unknown` now and land the commit later, just before the wrapper's next call of any kind.
    LandLateAfterUnknown,
}

/// What the wrapper does to one probe call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ProbeFault {
    /// Pass the call through.
    Pass,
    /// Answer `Unknown`.
    Unknown,
}

#[derive(Clone, Debug)]
struct OwnedCommit {
    key: CommitKey,
    ids: Vec<CheckpointId>,
    epoch: Epoch,
    results: Vec<WriteResult>,
    final_commit: bool,
    prepared_version: Option<u64>,
}

impl OwnedCommit {
    fn of(c: &TargetCommit<'_>) -> Self {
        Self {
            key: c.key.clone(),
            ids: c.ids.to_vec(),
            epoch: c.epoch,
            results: c.results.to_vec(),
            final_commit: c.final_commit,
            prepared_version: c.prepared_version,
        }
    }

    fn as_commit(&self) -> TargetCommit<'_> {
        TargetCommit {
            key: &self.key,
            ids: &self.ids,
            epoch: self.epoch,
            results: &self.results,
            final_commit: self.final_commit,
            prepared_version: self.prepared_version,
        }
    }
}

#[derive(Debug)]
struct FaultState {
    commits: VecDeque<CommitFault>,
    probes: VecDeque<ProbeFault>,
    random: Option<(SplitMix64, u64)>,
    late: Vec<OwnedCommit>,
    calls: Vec<String>,
}

/// Wraps any [`Target`] and injects faults from a script (consumed call by call, then passing), or at random
/// from a seed (a fault on one call in `one_in`).
#[derive(Debug)]
pub struct FaultyTarget<T> {
    inner: T,
    state: Mutex<FaultState>,
}

impl<T: Target> FaultyTarget<T> {
    /// A wrapper that follows `commits` and `probes` call by call, then passes everything through.
    pub fn scripted(inner: T, commits: Vec<CommitFault>, probes: Vec<ProbeFault>) -> Self {
        let state = FaultState {
            commits: commits.into(),
            probes: probes.into(),
            random: None,
            late: Vec::new(),
            calls: Vec::new(),
        };
        Self { inner, state: Mutex::new(state) }
    }

    /// A wrapper that injects a random fault into one call in `one_in`, from `seed`.
    pub fn seeded(inner: T, seed: u64, one_in: u64) -> Self {
        let this = Self::scripted(inner, Vec::new(), Vec::new());
        this.lock().random = Some((SplitMix64::new(seed), one_in.max(1)));
        this
    }

    /// The inner target.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// What happened, call by call (for test failure messages).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn land_late(&self) {
        let late = std::mem::take(&mut self.lock().late);
        for commit in late {
            let outcome = self.inner.commit(&commit.as_commit()).await;
            self.lock().calls.push(format!("late landing of key {}: {outcome:?}", commit.key.n));
        }
    }

    fn next_commit_fault(&self) -> CommitFault {
        let mut state = self.lock();
        if let Some(f) = state.commits.pop_front() {
            return f;
        }
        let Some((rng, one_in)) = &mut state.random else { return CommitFault::Pass };
        if rng.below(*one_in) != 0 {
            return CommitFault::Pass;
        }
        match rng.below(4) {
            0 => CommitFault::FailBeforeCommit,
            1 => CommitFault::LandThenLoseAck,
            2 => CommitFault::UnknownNotLanded,
            _ => CommitFault::LandLateAfterUnknown,
        }
    }

    fn next_probe_fault(&self) -> ProbeFault {
        let mut state = self.lock();
        if let Some(f) = state.probes.pop_front() {
            return f;
        }
        match &mut state.random {
            Some((rng, one_in)) => {
                if rng.below(*one_in) == 0 {
                    ProbeFault::Unknown
                } else {
                    ProbeFault::Pass
                }
            }
            None => ProbeFault::Pass,
        }
    }
}

#[async_trait]
impl<T: Target> Target for FaultyTarget<T> {
    async fn version(&self) -> Result<Option<u64>> {
        self.land_late().await;
        self.inner.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        self.land_late().await;
        let fault = self.next_commit_fault();
        let outcome = match fault {
            CommitFault::Pass => self.inner.commit(commit).await,
            CommitFault::FailBeforeCommit => {
                CommitOutcome::NotLanded { reason: "injected: failed before commit".into() }
            }
            CommitFault::LandThenLoseAck => {
                let landed = self.inner.commit(commit).await;
                self.lock().calls.push(format!("key {} landed ({landed:?}), ack lost", commit.key.n));
                CommitOutcome::Unknown { reason: "injected: ack lost".into() }
            }
            CommitFault::UnknownNotLanded => CommitOutcome::Unknown { reason: "injected: unknown, not landed".into() },
            CommitFault::LandLateAfterUnknown => {
                self.lock().late.push(OwnedCommit::of(commit));
                CommitOutcome::Unknown { reason: "injected: unknown, lands late".into() }
            }
        };
        self.lock().calls.push(format!("commit key {} {fault:?} -> {outcome:?}", commit.key.n));
        outcome
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        self.land_late().await;
        let fault = self.next_probe_fault();
        let outcome = match fault {
            ProbeFault::Pass => self.inner.probe(key, prepared_version).await,
            ProbeFault::Unknown => ProbeOutcome::Unknown { reason: "injected: probe failed".into() },
        };
        self.lock().calls.push(format!("probe key {} {fault:?} -> {outcome:?}", key.n));
        outcome
    }
}

/// An in-memory table that keeps only a watermark per job, like Delta's `txn` action: a probe of key n
/// answers Committed (without ids) when the watermark is at or past n. Commits are conditional on the watermark
/// being n − 1.
#[derive(Debug, Default)]
pub struct WatermarkTable {
    landed: Mutex<Vec<(CommitKey, Vec<WriteResult>)>>,
}

impl WatermarkTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every write result in the table, in commit order.
    pub fn results(&self) -> Vec<WriteResult> {
        self.lock().iter().flat_map(|(_, r)| r.iter().cloned()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(CommitKey, Vec<WriteResult>)>> {
        self.landed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn watermark(landed: &[(CommitKey, Vec<WriteResult>)], key: &CommitKey) -> Option<u64> {
        landed.iter().filter(|(k, _)| k.job == key.job).map(|(k, _)| k.n).max()
    }
}

#[async_trait]
impl Target for WatermarkTable {
    async fn version(&self) -> Result<Option<u64>> {
        Ok(Some(self.lock().len() as u64))
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let mut landed = self.lock();
        let expected = Self::watermark(&landed, commit.key).map_or(0, |w| w + 1);
        if commit.key.n != expected {
            return CommitOutcome::NotLanded {
                reason: format!("watermark expects key {expected}, not {}", commit.key.n),
            };
        }
        landed.push((commit.key.clone(), commit.results.to_vec()));
        CommitOutcome::Committed
    }

    async fn probe(&self, key: &CommitKey, _prepared_version: Option<u64>) -> ProbeOutcome {
        match Self::watermark(&self.lock(), key) {
            Some(w) if w >= key.n => ProbeOutcome::Committed { ids: None },
            _ => ProbeOutcome::NotCommitted,
        }
    }
}

/// One commit in a [`HistoryTable`]'s log.
#[derive(Clone, Debug)]
struct Version {
    key: CommitKey,
    epoch: Epoch,
    ids: Vec<CheckpointId>,
    results: Vec<WriteResult>,
}

/// An in-memory table with a version log, like Lance's manifests or Iceberg's snapshots: each commit is one
/// version recording its key, epoch and ids. A commit reads only the versions after its `prepared_version`
/// (reading a whole history per commit does not scale), refuses when its key or a later key or epoch of the job
/// is there, and otherwise appends. A probe reads the same range. This is the cheapest key exclusivity a
/// log-reading adapter can offer, and the committer must stay exactly-once on it.
#[derive(Debug, Default)]
pub struct HistoryTable {
    versions: Mutex<Vec<Version>>,
}

impl HistoryTable {
    /// An empty table (version 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// Every write result in the table, in commit order.
    pub fn results(&self) -> Vec<WriteResult> {
        self.lock().iter().flat_map(|v| v.results.iter().cloned()).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Version>> {
        self.versions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The job's commits in the versions after `prepared_version` (version v is index v − 1).
    fn since<'v>(versions: &'v [Version], key: &CommitKey, prepared_version: Option<u64>) -> Vec<&'v Version> {
        let from = usize::try_from(prepared_version.unwrap_or(0)).unwrap_or(usize::MAX);
        versions.iter().skip(from).filter(|v| v.key.job == key.job).collect()
    }
}

#[async_trait]
impl Target for HistoryTable {
    async fn version(&self) -> Result<Option<u64>> {
        Ok(Some(self.lock().len() as u64))
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let mut versions = self.lock();
        for seen in Self::since(&versions, commit.key, commit.prepared_version) {
            // Our own earlier attempt (its answer lost): the same commit, data included. Two stores without a
            // mirror share an epoch, so epoch and ids alone would take another driver's commit for ours.
            if seen.key.n == commit.key.n
                && seen.epoch == commit.epoch
                && seen.ids == commit.ids
                && seen.results == commit.results
            {
                return CommitOutcome::Committed;
            }
            if seen.key.n >= commit.key.n || seen.epoch > commit.epoch {
                return CommitOutcome::NotLanded {
                    reason: format!(
                        "key {} of epoch {} landed since version {:?}",
                        seen.key.n, seen.epoch, commit.prepared_version
                    ),
                };
            }
        }
        versions.push(Version {
            key: commit.key.clone(),
            epoch: commit.epoch,
            ids: commit.ids.to_vec(),
            results: commit.results.to_vec(),
        });
        CommitOutcome::Committed
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        match Self::since(&self.lock(), key, prepared_version).into_iter().find(|v| v.key.n == key.n) {
            Some(v) => ProbeOutcome::Committed { ids: Some(v.ids.clone()) },
            None => ProbeOutcome::NotCommitted,
        }
    }
}
