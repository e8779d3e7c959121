//! The stale-mirror fault class: a store restored from a mirror that lost the tail of its history (a lagging
//! replica, a bucket rolled back to a backup, a region failover), against a table that kept everything.
//!
//! The crash-free run journals every change that reached the mirror's bucket. For every prefix of that history
//! (0 ..= all of it), a new process that lost its local file restores from the bucket as it stood after the
//! prefix, against a copy of the table the whole job left, and runs what a rerun of the job runs: `recover`,
//! `finish()`, then a rescan that finds one more input, stages, seals and commits it. Each prefix
//! must end in one of two ways:
//!
//! - **refused** with `WrongStore` (the store is behind the table) — allowed only when the table holds a key the
//!   restored store has no record of, since a refusal of a usable mirror would leave the job stuck;
//! - **agreed**: the store's committed keys are exactly the table's, each with the same checkpoints, so the
//!   rerun's skip set says "done" for exactly what the table holds: nothing appended twice, nothing lost.
//!
//! Either way the table holds each checkpoint under one key at most, and any prefix restores (a prefix is a
//! state the bucket was in, so a restore refusing it as `Corrupt` is a bug).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::TryStreamExt as _;
use object_store::memory::InMemory;
use object_store::{ObjectStore as _, ObjectStoreExt as _};
use tokio::runtime::Runtime;

use super::driver::Driver;
use super::image::Image;
use super::system::World;
use super::{Op, Stall, Trace, Workload, runtime, stopped};
use crate::error::ErrorKind;
use crate::state::CheckpointState;
use crate::testkit::{CrashBackend, Journal, ProcessCrash};
use crate::types::{CheckpointId, Format, WriteResult};

/// What a run of the stale-mirror class covered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StaleReport {
    /// The prefixes of the mirror's history restored from (its changes, plus the empty prefix).
    pub prefixes: u64,
    /// Of those, how many the rerun refused as `WrongStore` (each one behind the table).
    pub refused: u64,
}

/// What the crash-free run leaves for the stale class: the mirror's history and the table's objects.
#[derive(Clone, Debug)]
pub(crate) struct History {
    pub journal: Journal,
    pub table: Arc<InMemory>,
}

/// The id, source key and result of the input the rerun's rescan finds.
const RESCAN: &str = "rescan";

/// Which keys, with which checkpoints.
type Keys = BTreeMap<u64, BTreeSet<CheckpointId>>;

impl Workload {
    /// Runs the stale-mirror class (see the module docs) over every prefix of the mirror's history.
    ///
    /// # Errors
    ///
    /// The first prefix whose rerun duplicated or lost a commit, was refused without being behind the table, or
    /// did not restore; or a workload without a mirror.
    pub fn run_stale_mirror(&self) -> Result<StaleReport, String> {
        let rt = runtime()?;
        let trace = self.trace(&rt)?;
        let changes = trace.history.as_ref().ok_or("the stale-mirror class needs a mirror")?.journal.landed().len();
        let mut refused = 0;
        for prefix in 0..=changes {
            if self.stale_at(&rt, &trace, prefix)? {
                refused += 1;
            }
        }
        Ok(StaleReport { prefixes: changes as u64 + 1, refused })
    }

    /// Restores from the mirror after its first `prefix` changes (modulo their count plus one) and checks the
    /// rerun; true when it was refused.
    ///
    /// # Errors
    ///
    /// As [`Workload::run_stale_mirror`].
    pub fn stale_at(&self, rt: &Runtime, trace: &Trace, prefix: usize) -> Result<bool, String> {
        let history = trace.history.as_ref().ok_or("the stale-mirror class needs a mirror")?;
        let prefix = prefix % (history.journal.landed().len() + 1);
        self.stale_inner(rt, history, prefix).map_err(|e| format!("{} stale mirror at change {prefix}: {e}", self.name))
    }

    fn stale_inner(&self, rt: &Runtime, history: &History, prefix: usize) -> Result<bool, String> {
        let system = self.system.as_ref().ok_or("no system")?;
        let bucket = rt.block_on(history.journal.replay(prefix)).map_err(|e| e.to_string())?;
        let table = rt.block_on(copy(&history.table)).map_err(|e| e.to_string())?;
        let mut system = system.clone();
        (system.commit_faults, system.probe_faults, system.stall) = (Vec::new(), Vec::new(), Stall::Off);
        let world = Arc::new(World::over(&system, Arc::new(bucket), Arc::new(table)));
        let held = table_keys(rt, &world)?;
        let mut driver = Driver::with_world(rt, CrashBackend::new(), ProcessCrash::new(), world.clone(), false)?;
        driver.at_op(self.ops.len());
        let refusal = rerun(&mut driver)?;
        let after = table_keys(rt, &world)?;
        let mut seen = BTreeSet::new();
        for id in after.values().flatten() {
            if !seen.insert(id) {
                return Err(format!("the table holds {id} under two keys: {after:?}"));
            }
        }
        let restored = match driver.store() {
            Some(store) => Image::from_store(store)?.map(|i| i.commit_records().clone()).unwrap_or_default(),
            None => BTreeMap::new(),
        };
        if let Some(call) = refusal {
            let unknown: Vec<u64> = held.keys().filter(|n| !restored.contains_key(n)).copied().collect();
            driver.close().map_err(stopped)?;
            if unknown.is_empty() {
                return Err(format!("{call} refused a mirror that is not behind the table (it holds {held:?})"));
            }
            return Ok(true);
        }
        let committed: Keys = restored
            .iter()
            .filter(|(_, c)| matches!(c.state, CheckpointState::Committed { .. }))
            .map(|(n, c)| (*n, c.ids.iter().cloned().collect()))
            .collect();
        driver.close().map_err(stopped)?;
        if committed != after {
            return Err(format!(
                "the rerun's store and the table disagree\n  store committed {committed:?}\n  table {after:?}"
            ));
        }
        Ok(false)
    }
}

/// The rerun of the job on a store restored from the stale mirror: open, recover, commit what is pending, then
/// a rescan that finds one more input and commits it. Returns the call refused as `WrongStore`, if any.
fn rerun(driver: &mut Driver<'_>) -> Result<Option<String>, String> {
    driver.open().map_err(|e| format!("the restore: {}", stopped(e)))?;
    if driver.store().is_none() {
        return Ok(Some("open".into()));
    }
    match driver.recover_call().map_err(|e| format!("recover: {}", stopped(e)))? {
        Err(e) if e.kind() == ErrorKind::WrongStore => return Ok(Some("recover".into())),
        Err(e) => return Err(format!("recover: {e}")),
        Ok(()) => {}
    }
    let id = CheckpointId::new(RESCAN).map_err(|e| e.to_string())?;
    let result = WriteResult::new(Format::Parquet, RESCAN.as_bytes().to_vec()).map_err(|e| e.to_string())?;
    let rescan = [
        Op::CommitPending { final_commit: false },
        Op::Stage { id: id.clone(), part: 0, keys: vec![RESCAN.as_bytes().to_vec()], results: vec![result] },
        Op::Seal { id, parts: 1 },
        Op::CommitPending { final_commit: true },
    ];
    for (i, op) in rescan.iter().enumerate() {
        match driver.play(i, op).map_err(|e| format!("{op:?}: {}", stopped(e)))? {
            Err(class) if class == "WrongStore" => return Ok(Some(format!("{op:?}"))),
            Err(class) => return Err(format!("{op:?} failed: {class}")),
            Ok(()) => {}
        }
    }
    Ok(None)
}

fn table_keys(rt: &Runtime, world: &World) -> Result<Keys, String> {
    let commits = rt.block_on(world.table().commits()).map_err(|e| e.to_string())?;
    Ok(commits.into_iter().map(|c| (c.n, c.ids.into_iter().collect())).collect())
}

/// A copy of every object of `from`.
async fn copy(from: &InMemory) -> object_store::Result<InMemory> {
    let to = InMemory::new();
    let metas: Vec<_> = from.list(None).try_collect().await?;
    for meta in metas {
        let bytes = from.get(&meta.location).await?.bytes().await?;
        to.put(&meta.location, bytes.into()).await?;
    }
    Ok(to)
}
