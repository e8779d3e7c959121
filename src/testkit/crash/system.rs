//! What a workload runs against besides its local file: the target table (a [`DirTable`] on an in-memory
//! object store, wrapped in a scripted [`FaultyTarget`]) and, optionally, the mirror (a [`FaultStore`] over
//! another in-memory object store). The objects of both outlive a crash; the process's view of them does not.

use std::sync::Arc;

use async_trait::async_trait;
use object_store::memory::InMemory;
use object_store::path::Path;

use crate::DirTable;
use crate::commit::{CommitOutcome, ProbeOutcome, Target, TargetCommit};
use crate::error::{Error, Result};
use crate::mirror::{MirrorMode, MirrorSettings};
use crate::testkit::process::{Component, ProcessCrash};
use crate::testkit::{CommitFault, FaultStore, FaultyTarget, Journal, ManualClock, ProbeFault};
use crate::types::CommitKey;

/// A snapshot interval that no workload reaches: the mirror makes no snapshots, so its background thread does
/// no I/O and every run interleaves the same way.
pub const SNAPSHOTS_OFF: u64 = u64::MAX;

/// What a workload runs against besides the local file.
#[derive(Clone, Debug)]
pub struct System {
    /// The mirror's settings, if the store is mirrored. Its clock never moves, so nothing is ever collected.
    pub mirror: Option<MirrorSettings>,
    /// What the target does to its commit calls, call by call (then it passes everything through).
    pub commit_faults: Vec<CommitFault>,
    /// What the target does to its probes, likewise.
    pub probe_faults: Vec<ProbeFault>,
    /// Whether the local file is lost with the process: every recovery restores it from the mirror alone. A
    /// synchronous mirror holds every acknowledged call; over an asynchronous one the job reruns from the first
    /// operation the mirror lacks.
    pub lose_local_file: bool,
    /// Whether the mirror puts the crash stopped are delivered late, and when (see [`Stall`]).
    pub stall: Stall,
    /// For the runner's own test: late puts are delivered without their conditions (as by a store that ignores
    /// `If-None-Match`/`If-Match`), which the runner must catch.
    pub(crate) late_puts_unconditional: bool,
}

/// The stall fault class: a crash that does not lose the dead process's mirror puts but delays them. Every put
/// the process tried at and after its crash point (the request in flight, and those its threads still sent) is
/// kept and delivered, in order and with its original conditions, once the successor has moved on; then the
/// mirror must still restore to the successor's state and find nothing to do. It is how a paused zombie's
/// requests, or a request stuck in the network, reach a bucket that other writers have moved on in.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Stall {
    /// Puts stopped by the crash are lost (a plain crash).
    #[default]
    Off,
    /// Delivered right after the successor opened (fenced) and before it recovers and finishes.
    AfterSuccessorOpen,
    /// Delivered after the successor finished the job.
    AfterSuccessorEnd,
}

impl System {
    /// A target without faults and no mirror.
    pub fn target() -> Self {
        Self {
            mirror: None,
            commit_faults: Vec::new(),
            probe_faults: Vec::new(),
            lose_local_file: false,
            stall: Stall::Off,
            late_puts_unconditional: false,
        }
    }

    /// A target without faults and a mirror in `mode`, making a snapshot every `snapshot_interval_records`
    /// ([`SNAPSHOTS_OFF`] for none).
    pub fn mirrored(mode: MirrorMode, snapshot_interval_records: u64) -> Self {
        let settings = MirrorSettings {
            mode,
            snapshot_interval_records,
            gc_age_ms_min: u64::MAX,
            request_timeout_ms: 30_000,
            puts_in_flight_max: crate::limits::MIRROR_SLOTS_IN_FLIGHT_MAX as u32,
            // Paced by records only, at fixed intervals, as the workloads' crash points were counted.
            snapshot_interval_bytes: u64::MAX,
            snapshot_log_ratio_percent: 0,
            snapshot_log_records_max: u64::MAX,
        };
        Self { mirror: Some(settings), ..Self::target() }
    }

    /// The same system whose target injects these faults.
    pub fn with_faults(mut self, commits: Vec<CommitFault>, probes: Vec<ProbeFault>) -> Self {
        self.commit_faults = commits;
        self.probe_faults = probes;
        self
    }

    /// The same system, whose local file is lost at every crash (see [`System::lose_local_file`]).
    pub fn losing_local_file(mut self) -> Self {
        self.lose_local_file = true;
        self
    }

    /// The same system, whose crashes delay the dead process's mirror puts (see [`Stall`]).
    pub fn stalling(mut self, stall: Stall) -> Self {
        self.stall = stall;
        self
    }

    /// Whether the local file's own operations are the same in every run: true unless the mirror makes
    /// snapshots (on a background thread, moving the local log's truncation point). An asynchronous mirror's
    /// uploads interleave differently with them from run to run, so a point k may fall on another operation,
    /// but the local file's own sequence stays the same.
    pub fn local_deterministic(&self) -> bool {
        self.mirror.as_ref().is_none_or(|m| m.snapshot_interval_records == SNAPSHOTS_OFF)
    }
}

/// The world one run plays in: what outlives the process (the mirror's objects, the table and the target's
/// faults, including a commit that lands late), and the mirror's clock.
pub(crate) struct World {
    pub system: System,
    pub bucket: Arc<InMemory>,
    pub target: Arc<FaultyTarget<DirTable>>,
    /// The table's objects.
    pub table_bucket: Arc<InMemory>,
    pub clock: ManualClock,
    /// The mirror bucket's history and the dead processes' unsent puts.
    pub journal: Journal,
}

impl World {
    pub(crate) fn new(system: &System) -> Self {
        Self::over(system, Arc::new(InMemory::new()), Arc::new(InMemory::new()))
    }

    /// A world over existing objects: a mirror bucket and a table's bucket.
    pub(crate) fn over(system: &System, bucket: Arc<InMemory>, table_bucket: Arc<InMemory>) -> Self {
        let table = DirTable::new(table_bucket.clone(), Self::table_prefix());
        let target = FaultyTarget::scripted(table, system.commit_faults.clone(), system.probe_faults.clone());
        Self {
            system: system.clone(),
            bucket,
            target: Arc::new(target),
            table_bucket,
            clock: ManualClock::new(0),
            journal: Journal::new(),
        }
    }

    fn table_prefix() -> Path {
        Path::from("table")
    }

    /// The mirror's prefix in its bucket.
    pub(crate) fn prefix() -> Path {
        Path::from("mirror/crash-job")
    }

    /// A view of the mirror's objects for one process (attached to it, when given).
    pub(crate) fn mirror_store(&self, process: Option<&ProcessCrash>) -> FaultStore<Arc<InMemory>> {
        let store = FaultStore::new(self.bucket.clone());
        store.journal(&self.journal);
        if let Some(p) = process {
            store.attach(p);
        }
        store
    }

    /// The table, read directly (not through the faults or any process).
    pub(crate) fn table(&self) -> &DirTable {
        self.target.inner()
    }
}

/// The target as one process sees it: each call is one of the process's points, and so is the moment a commit
/// call has returned (the commit may have landed, and a process that dies then never learns its outcome). A
/// dead process makes no call.
pub(crate) struct ProcessTarget {
    pub inner: Arc<FaultyTarget<DirTable>>,
    pub process: ProcessCrash,
}

#[async_trait]
impl Target for ProcessTarget {
    async fn version(&self) -> Result<Option<u64>> {
        if !self.process.tick(Component::Target, || "target version".into()) {
            return Err(Error::poisoned("the process died before the target's version was read"));
        }
        self.inner.version().await
    }

    async fn commit(&self, commit: &TargetCommit<'_>) -> CommitOutcome {
        let n = commit.key.n;
        if !self.process.tick(Component::Target, || format!("target commit of key {n}")) {
            return CommitOutcome::Unknown { reason: "the process died before the call".into() };
        }
        let outcome = self.inner.commit(commit).await;
        if !self.process.tick(Component::Target, || format!("target commit of key {n} answered {outcome:?}")) {
            return CommitOutcome::Unknown { reason: "the process died before it read the answer".into() };
        }
        outcome
    }

    async fn probe(&self, key: &CommitKey, prepared_version: Option<u64>) -> ProbeOutcome {
        if !self.process.tick(Component::Target, || format!("target probe of key {}", key.n)) {
            return ProbeOutcome::Unknown { reason: "the process died before the probe".into() };
        }
        self.inner.probe(key, prepared_version).await
    }
}
