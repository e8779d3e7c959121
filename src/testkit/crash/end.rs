//! The end of a job with a system: commit everything still pending, then check what the job left against what
//! the caller staged — the table holds every sealed checkpoint's write results exactly once, every sealed
//! checkpoint is committed, the skip set is exactly the keys of committed checkpoints — and, with a mirror,
//! that a store restored from the mirror alone has the same state and finds nothing left to do.

use std::collections::{BTreeMap, BTreeSet};

use super::Logical;
use super::driver::{Driver, Stop};
use super::image::Image;
use super::system::{ProcessTarget, World};
use crate::commit::Committer;
use crate::state::CheckpointState;
use crate::store::Store;
use crate::testkit::{CrashBackend, ProcessCrash};
use crate::types::SourceKey;

/// The most `commit_pending` calls the job's last step makes while the target's answers are unknown; a
/// workload's scripted faults run out well before.
const DRAIN_CALLS_MAX: usize = 8;

/// What a finished job leaves that does not depend on where it crashed. Commit key numbers are erased: a
/// recovery commits the checkpoints sealed at the crash under their own key, so a job that crashed may group
/// its checkpoints into keys differently from one that did not.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Summary {
    /// Per checkpoint: its state (key numbers erased), sealed part count and result count.
    pub checkpoints: BTreeMap<String, (CheckpointState, u32, u32)>,
    /// The skip set: every processed key and its owner.
    pub keys: BTreeMap<Vec<u8>, String>,
    /// Every data file the table's commits reference, sorted.
    pub files: Vec<String>,
}

/// What a finished job left: its summary, and its full logical state (which a restore must reproduce).
#[derive(Clone, Debug)]
pub(crate) struct End {
    pub summary: Summary,
    pub logical: Logical,
}

fn erase_key(state: CheckpointState) -> CheckpointState {
    match state {
        CheckpointState::Committing { .. } => CheckpointState::Committing { key: 0 },
        CheckpointState::CommitUnknown { .. } => CheckpointState::CommitUnknown { key: 0 },
        CheckpointState::Committed { key } => CheckpointState::Committed { key: key.map(|_| 0) },
        other => other,
    }
}

fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn nothing_pending(store: &Store, backend: &CrashBackend) -> Result<bool, Stop> {
    let pending = match store.pending() {
        Ok(pending) => pending,
        Err(_) if backend.is_dead() => return Err(Stop::Crashed),
        Err(e) => return Err(Stop::Failed(format!("pending(): {e}"))),
    };
    Ok(pending.in_flight.is_none() && pending.checkpoints.iter().all(|c| c.info.state == CheckpointState::Staged))
}

impl Driver<'_> {
    /// The job's last step: commit everything pending (the last key final), again while the target's answers
    /// are unknown, until nothing is pending.
    pub(crate) fn drain(&mut self) -> Result<(), Stop> {
        for _ in 0..DRAIN_CALLS_MAX {
            let target = self.target()?;
            let r = self.rt.block_on(Committer::new(self.live()?, &target).finish());
            self.record("drain: finish()".into(), &r)?;
            if r.is_ok() && nothing_pending(self.live()?, self.backend())? {
                return Ok(());
            }
        }
        Err(Stop::Failed(format!("still pending after {DRAIN_CALLS_MAX} commit_pending calls")))
    }

    /// Checks what the finished job left (the store still open) and returns it. `universe` is every source key
    /// the workload stages.
    pub(crate) fn end_state(&self, universe: &BTreeSet<SourceKey>) -> Result<End, String> {
        let store = self.live().map_err(|_| "no open store at the end")?;
        let world = self.world.as_ref().ok_or("no system")?;
        let image = Image::from_store(store)?.ok_or("no store at the end")?;
        image.check().map_err(|e| format!("the finished image: {e}"))?;
        let records = image.checkpoint_records();
        for (id, r) in records {
            if matches!(
                r.state,
                CheckpointState::Sealed | CheckpointState::Committing { .. } | CheckpointState::CommitUnknown { .. }
            ) {
                return Err(format!("lost: {id} is still {:?} after the job finished", r.state));
            }
        }

        // The table: one commit per key, in sequence, each holding exactly its checkpoints' staged results.
        let table = self.rt.block_on(world.table().commits()).map_err(fail)?;
        let numbers: Vec<u64> = table.iter().map(|c| c.n).collect();
        let keys = image.commit_records();
        if numbers != keys.keys().copied().collect::<Vec<_>>() {
            return Err(format!("the table holds keys {numbers:?}, the store recorded {:?}", keys.keys()));
        }
        let mut files: Vec<String> = Vec::new();
        for commit in &table {
            let recorded = &keys[&commit.n];
            if recorded.ids != commit.ids || recorded.state != (CheckpointState::Committed { key: Some(commit.n) }) {
                return Err(format!("table key {} holds {:?}, the store recorded {recorded:?}", commit.n, commit.ids));
            }
            let mut staged = Vec::new();
            for id in &commit.ids {
                for (_, results) in self.memory.get(id).into_iter().flat_map(BTreeMap::values) {
                    for r in results {
                        staged.push(String::from_utf8(r.bytes().to_vec()).map_err(fail)?);
                    }
                }
            }
            if commit.files != staged {
                return Err(format!(
                    "table key {} holds files {:?}, its checkpoints staged {staged:?}",
                    commit.n, commit.files
                ));
            }
            files.extend(commit.files.iter().cloned());
        }
        files.sort();

        // Every committed checkpoint is what the caller staged, and one without a target commit staged no results.
        let mut processed = BTreeSet::new();
        for (id, r) in records {
            let CheckpointState::Committed { key } = r.state else { continue };
            let staged = self.memory.iter().find(|(i, _)| i.as_str() == id).map(|(_, parts)| parts);
            let staged = staged.ok_or_else(|| format!("{id} is committed but the caller never staged it"))?;
            if staged.len() != r.parts as usize {
                return Err(format!("{id} is committed with {} parts, the caller staged {}", r.parts, staged.len()));
            }
            if key.is_none() && staged.values().any(|(_, results)| !results.is_empty()) {
                return Err(format!("lost: {id} was committed without a target commit but staged results"));
            }
            processed.extend(staged.values().flat_map(|(keys, _)| keys.iter().cloned()));
        }

        // No duplicates, no loss: the table holds each staged result of the committed checkpoints exactly as
        // often as they staged it (a caller may stage the same bytes in two checkpoints), and nothing else.
        let mut staged: Vec<String> = Vec::new();
        for (id, r) in records {
            if matches!(r.state, CheckpointState::Committed { key: Some(_) }) {
                let parts = self.memory.iter().find(|(i, _)| i.as_str() == id).map(|(_, parts)| parts);
                for (_, results) in parts.into_iter().flat_map(BTreeMap::values) {
                    for r in results {
                        staged.push(String::from_utf8(r.bytes().to_vec()).map_err(fail)?);
                    }
                }
            }
        }
        staged.sort();
        if files != staged {
            return Err(format!(
                "duplicate or lost: the table holds {files:?}, the committed checkpoints staged {staged:?}"
            ));
        }

        // The skip set: exactly the keys of committed checkpoints.
        let listed: BTreeSet<SourceKey> = store.processed_keys().collect::<Result<_, _>>().map_err(fail)?;
        if listed != processed {
            return Err(format!("the skip set is {listed:?}, the committed checkpoints' keys are {processed:?}"));
        }
        for key in universe {
            let answer = store.is_processed(key).map_err(fail)?;
            if answer != processed.contains(key) {
                return Err(format!("is_processed({key:?}) = {answer}, expected {}", !answer));
            }
        }

        let summary = Summary {
            checkpoints: records.iter().map(|(id, r)| (id.clone(), (erase_key(r.state), r.parts, r.results))).collect(),
            keys: image.key_owners().clone(),
            files,
        };
        Ok(End { summary, logical: image.logical() })
    }

    /// With a mirror: restores a store from the mirror alone (a new local file), which must have the state the
    /// job ended with, and whose recovery must find nothing to do. Call it after the job's store is closed.
    pub(crate) fn restore_check(&self, end: &End) -> Result<(), String> {
        let world: &World = self.world.as_ref().ok_or("no system")?;
        let Some(settings) = &world.system.mirror else { return Ok(()) };
        let builder = Store::builder(self.job().clone(), self.target_identity().clone())
            .backend(CrashBackend::new())
            .writer_tag(u128::MAX)
            .mirror(std::sync::Arc::new(world.mirror_store(None)), World::prefix(), settings.clone())
            .clock(std::sync::Arc::new(world.clock.clone()))
            .must_exist();
        let store = self.rt.block_on(builder.open()).map_err(|e| format!("restore from the mirror alone: {e}"))?;
        let result = (|| {
            let restored = Image::from_store(&store)?.map(|i| i.logical());
            if restored.as_ref() != Some(&end.logical) {
                return Err(format!(
                    "restored from the mirror alone: {restored:#?}\n  the job ended with {:#?}",
                    end.logical
                ));
            }
            let before = self.rt.block_on(world.table().commits()).map_err(fail)?.len();
            let target = ProcessTarget { inner: world.target.clone(), process: ProcessCrash::new() };
            let report = self.rt.block_on(Committer::new(&store, &target).recover()).map_err(fail)?;
            let after = self.rt.block_on(world.table().commits()).map_err(fail)?.len();
            if !report.committed_keys.is_empty()
                || report.marked_landed.is_some()
                || report.recommitted.is_some()
                || report.blocked.is_some()
                || after != before
            {
                return Err(format!(
                    "the restored store's recovery did something: {report:?}, table {before} → {after}"
                ));
            }
            Ok(())
        })();
        store.close();
        result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::testkit::crash::{Op, System, runtime};
    use crate::types::{CheckpointId, Format, WriteResult};

    fn stage(id: &str, key: &str, file: &str) -> Op {
        let results = vec![WriteResult::new(Format::Other("dir-table".into()), file.as_bytes().to_vec()).unwrap()];
        Op::Stage { id: CheckpointId::new(id).unwrap(), part: 0, keys: vec![key.as_bytes().to_vec()], results }
    }

    fn seal(id: &str) -> Op {
        Op::Seal { id: CheckpointId::new(id).unwrap(), parts: 1 }
    }

    /// The end checks are only evidence if they can fail: a lost result, a wrong skip set, a checkpoint left
    /// sealed and a commit the store never recorded are each refused.
    #[test]
    fn the_end_checks_can_fail() {
        let rt = runtime().unwrap();
        let world = Arc::new(World::new(&System::target()));
        let mut d = Driver::with_world(&rt, CrashBackend::new(), ProcessCrash::new(), world.clone(), false).unwrap();
        d.open().unwrap();
        let ops = [stage("a", "ka", "fa"), seal("a"), stage("b", "kb", "fb"), seal("b"), Op::Recover];
        for (i, op) in ops.iter().enumerate() {
            assert_eq!(d.play(i, op).unwrap(), Ok(()));
        }
        d.drain().unwrap();
        let universe: BTreeSet<SourceKey> = [b"ka".to_vec(), b"kb".to_vec(), b"kx".to_vec()].into();
        let end = d.end_state(&universe).unwrap();
        assert_eq!(end.summary.files, ["fa", "fb"]);

        // The caller staged a result the table lacks: lost.
        let a = CheckpointId::new("a").unwrap();
        let saved = d.memory.clone();
        let extra = WriteResult::new(Format::Other("dir-table".into()), b"fz".to_vec()).unwrap();
        d.memory.get_mut(&a).unwrap().get_mut(&0).unwrap().1.push(extra);
        assert!(d.end_state(&universe).unwrap_err().contains("holds files"));
        // The caller staged a key the skip set lacks.
        d.memory = saved.clone();
        d.memory.get_mut(&a).unwrap().get_mut(&0).unwrap().0.push(b"kx".to_vec());
        assert!(d.end_state(&universe).unwrap_err().contains("skip set"));
        d.memory = saved;

        // A commit the store never recorded lands in the table (a duplicate of fa under the next key).
        let key = crate::types::CommitKey { job: d.job().clone(), n: 1 };
        let ids = vec![a.clone()];
        let results = vec![WriteResult::new(Format::Other("dir-table".into()), b"fa".to_vec()).unwrap()];
        let commit = crate::commit::TargetCommit {
            key: &key,
            ids: &ids,
            epoch: 9,
            results: &results,
            final_commit: false,
            prepared_version: None,
        };
        let outcome = rt.block_on(crate::commit::Target::commit(world.table(), &commit));
        assert_eq!(outcome, crate::commit::CommitOutcome::Committed);
        assert!(d.end_state(&universe).unwrap_err().contains("table holds keys"));

        // A checkpoint left sealed.
        let mut d = Driver::with_world(&rt, CrashBackend::new(), ProcessCrash::new(), world, false).unwrap();
        d.open().unwrap();
        assert_eq!(d.play(0, &stage("c", "kc", "fc")).unwrap(), Ok(()));
        assert_eq!(d.play(1, &seal("c")).unwrap(), Ok(()));
        assert!(d.end_state(&universe).unwrap_err().contains("lost: c is still Sealed"));
    }
}
