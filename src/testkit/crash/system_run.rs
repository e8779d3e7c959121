//! The crash-point runner for a workload with a [`System`]: the local file, the mirror and the target are one
//! process, whose I/O points are counted across all three ([`ProcessCrash`]). At point k the whole process
//! dies; the next run reopens the local crash image with the same mirror objects and the same table, runs
//! `Committer::recover`, finishes the workload and the job, and is checked (see [`super`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::runtime::Runtime;

use super::driver::{Driver, Stop};
use super::end::End;
use super::stale::History;
use super::system::World;
use super::{Image, Logical, Op, OpOutcome, Stall, System, Trace, Workload, stopped};
use crate::error::ErrorKind;
use crate::mirror::{MirrorMode, MirrorView};
use crate::state::CheckpointState;
use crate::testkit::{Component, CrashBackend, Mutation, ProcessCrash};
use crate::types::SourceKey;

/// Plays `ops[start..]` on an open store, then the job's last step, checks the end and closes.
fn play_from(
    driver: &mut Driver<'_>,
    ops: &[Op],
    start: usize,
    universe: &BTreeSet<SourceKey>,
) -> Result<(Vec<OpOutcome>, End), Stop> {
    let mut outcomes = Vec::new();
    for (i, op) in ops.iter().enumerate().skip(start) {
        outcomes.push(driver.play(i, op)?);
    }
    driver.at_op(ops.len());
    driver.drain()?;
    let end = match driver.end_state(universe) {
        Ok(end) => end,
        // An asynchronous upload may kill the process while the end is read: a crash like any other.
        Err(_) if driver.backend().is_dead() => return Err(Stop::Crashed),
        Err(e) => return Err(Stop::Failed(format!("at the end: {e}"))),
    };
    driver.close()?;
    Ok((outcomes, end))
}

/// Whether a finishing outcome agrees with the crash-free run's. A commit or recovery may meet an unknown
/// outcome at another call than in the crash-free run (a recovery probes, consuming the target's scripted
/// faults earlier), so for those two operations `Ok` and a `Target` error stand for each other. And the
/// recovery after a crash commits every sealed checkpoint, so an abort the crash-free run refused on a Sealed
/// checkpoint (`SealedCannotAbort`) may be refused on a committed one (`AlreadySealed`).
fn agrees(op: &Op, got: &OpOutcome, want: &OpOutcome) -> bool {
    let target = |o: &OpOutcome| o.is_ok() || o.as_ref().err().is_some_and(|e| e == "Target");
    let sealed = |o: &OpOutcome| o.as_ref().err().is_some_and(|e| e == "SealedCannotAbort" || e == "AlreadySealed");
    got == want
        || (matches!(op, Op::CommitPending { .. } | Op::Recover) && target(got) && target(want))
        || (matches!(op, Op::Abort { .. }) && sealed(got) && sealed(want))
}

fn universe(ops: &[Op]) -> BTreeSet<SourceKey> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Stage { keys, .. } => Some(keys.clone()),
            Op::WindowSeals { seals } => Some(seals.iter().flat_map(|(_, keys, _)| keys.iter().cloned()).collect()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// Delivers the puts the dead process never sent (the stall fault class, [`Stall`]), in order and with their
/// original conditions; returns each with whether it landed.
fn deliver_late_puts(rt: &Runtime, world: &World) -> Vec<(String, bool)> {
    world
        .journal
        .take_unsent()
        .into_iter()
        .map(|mut put| {
            if world.system.late_puts_unconditional
                && let Mutation::Put { opts, .. } = &mut put
            {
                *opts = object_store::PutOptions::default();
            }
            let landed = rt.block_on(put.apply(world.bucket.as_ref())).is_ok();
            (put.location().to_string(), landed)
        })
        .collect()
}

/// What one crash point's recovery met beyond passing: the puts a crash stopped and the stall class delivered
/// late ([`Stall`]), and, over an asynchronous mirror with the disk lost, what the mirror lacked.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct CrashNotes {
    /// Late puts delivered.
    pub delivered: u64,
    /// Of those, landed (the others were refused by their conditions).
    pub landed: u64,
    /// Operations the rerun redid because the restored mirror lacked calls acknowledged before the crash.
    pub redone: u64,
    /// Commit keys whose mark was acknowledged before the crash but which the restored mirror held
    /// `Committing`: recovery found them in the table.
    pub marks_lost: u64,
}

impl CrashNotes {
    fn late(delivered: &[(String, bool)]) -> Self {
        Self {
            delivered: delivered.len() as u64,
            landed: delivered.iter().filter(|(_, landed)| *landed).count() as u64,
            ..Self::default()
        }
    }
}

fn late_note(delivered: &[(String, bool)]) -> String {
    if delivered.is_empty() {
        return String::new();
    }
    let puts: Vec<String> =
        delivered.iter().map(|(p, landed)| format!("{p} ({})", if *landed { "landed" } else { "refused" })).collect();
    format!("\n  after the dead process's late puts: {}", puts.join(", "))
}

impl Workload {
    pub(super) fn trace_system(&self, rt: &Runtime, system: &System) -> Result<Trace, String> {
        let process = ProcessCrash::new();
        let backend = CrashBackend::new();
        backend.record_syncs();
        let world = Arc::new(World::new(system));
        let mut driver = Driver::with_world(rt, backend.clone(), process.clone(), world.clone(), true)?;
        let universe = universe(&self.ops);
        driver.at_op(0);
        let (outcomes, end) =
            driver.open().and_then(|()| play_from(&mut driver, &self.ops, 0, &universe)).map_err(super::stopped)?;
        let io_ops = process.ops();
        let per_component = [Component::Local, Component::Mirror, Component::Target].map(|c| process.ops_of(c));
        driver.restore_check(&end)?;
        let mut images = vec![None];
        for (i, image) in driver.after.take().unwrap_or_default().into_iter().enumerate() {
            if let Some(image) = &image {
                image.check().map_err(|e| format!("after call {i} ({}): {e}", driver.calls[i].what))?;
            }
            images.push(image);
        }
        let mut syncs = Vec::new();
        let mut seq_states: BTreeMap<u64, Logical> = BTreeMap::new();
        for (at, bytes) in backend.sync_history() {
            let image = Image::read_bytes(bytes)?;
            if let Some(image) = &image {
                image.check().map_err(|e| format!("durable image at local operation {at}: {e}"))?;
                let logical = image.logical();
                match seq_states.get(&image.next_seq()) {
                    Some(known) if *known != logical => {
                        return Err(format!(
                            "two durable states at seq {}: {known:#?} and {logical:#?}",
                            image.next_seq()
                        ));
                    }
                    Some(_) => {}
                    None => drop(seq_states.insert(image.next_seq(), logical)),
                }
            }
            syncs.push((at, image));
        }
        Ok(Trace {
            calls: driver.calls,
            images,
            outcomes,
            final_logical: None,
            io_ops,
            syncs,
            seq_states,
            end: Some(end),
            per_component,
            history: system
                .mirror
                .is_some()
                .then(|| History { journal: world.journal.clone(), table: world.table_bucket.clone() }),
        })
    }

    pub(super) fn crash_system(
        &self,
        rt: &Runtime,
        trace: &Trace,
        k: u64,
        system: &System,
    ) -> Result<CrashNotes, String> {
        let process = ProcessCrash::new();
        process.crash_at(Some(k));
        let backend = CrashBackend::new();
        let world = Arc::new(World::new(system));
        let mut driver = Driver::with_world(rt, backend.clone(), process.clone(), world.clone(), false)?;
        let universe = universe(&self.ops);
        driver.at_op(0);
        let first = driver.open().and_then(|()| play_from(&mut driver, &self.ops, 0, &universe));
        match first {
            Ok((outcomes, end)) => {
                // The crash point lies past the run's last I/O point (a run whose interleaving differs).
                let want = trace.end.as_ref().map(|e| &e.summary);
                return if outcomes != trace.outcomes || want != Some(&end.summary) {
                    Err("a run without a crash differs from the trace".into())
                } else {
                    Ok(CrashNotes::default())
                };
            }
            Err(Stop::Failed(message)) => return Err(message),
            Err(Stop::Crashed) => {}
        }
        let point = process
            .killed_by()
            .map_or_else(|| "after the process died".into(), |(_, c, what)| format!("{c:?}: {what}"));
        let calls = &driver.calls;
        let last = calls.len() - 1;
        for (i, call) in calls.iter().enumerate() {
            let reference = trace.calls.get(i).ok_or("more calls than the trace")?;
            if call.what != reference.what || (i < last && call.outcome != reference.outcome) {
                return Err(format!(
                    "[{point}] call {i}: {call:?} where the trace has {reference:?} (non-deterministic)"
                ));
            }
        }
        let resume = calls[last].op;
        let at = format!("[{point}] during call {last} {}", calls[last].what);
        self.after_crash(rt, trace, &world, driver, &backend, last, resume, &universe).map_err(|e| format!("{at}: {e}"))
    }

    #[expect(clippy::too_many_arguments, reason = "one crash's context, passed once")]
    fn after_crash(
        &self,
        rt: &Runtime,
        trace: &Trace,
        world: &World,
        driver: Driver<'_>,
        backend: &CrashBackend,
        last: usize,
        resume: usize,
        universe: &BTreeSet<SourceKey>,
    ) -> Result<CrashNotes, String> {
        let system = &world.system;
        // The local file: exactly the durable image the crash-free run had after as many local operations.
        let image = backend.crash_image();
        let local = Image::read(&image)?;
        if let Some(l) = &local {
            l.check().map_err(|e| format!("crash image: {e}"))?;
        }
        if system.local_deterministic() {
            let expected = trace.syncs.iter().rev().find(|(at, _)| *at <= backend.ops()).and_then(|(_, i)| i.as_ref());
            if local.as_ref() != expected {
                return Err(format!(
                    "the crash image after {} local operations is not the trace's\n  got {local:#?}\n  want {expected:#?}",
                    backend.ops()
                ));
            }
        }
        let mirrored = self.mirror_at_crash(rt, trace, world, last)?;
        // Intents before the target: every key the table holds was recorded, with its ids, before it was called.
        let table = rt.block_on(world.table().commits()).map_err(|e| e.to_string())?;
        let recorded =
            |image: Option<&Image>, n: u64| image.and_then(|i| i.commit_records().get(&n)).map(|c| c.ids.clone());
        for commit in &table {
            if recorded(local.as_ref(), commit.n).as_ref() != Some(&commit.ids) {
                return Err(format!(
                    "the table holds key {} for {:?}, which the local file never recorded",
                    commit.n, commit.ids
                ));
            }
            if system.mirror.is_some()
                && recorded(mirrored.as_ref().map(|m| &m.1), commit.n).as_ref() != Some(&commit.ids)
            {
                return Err(format!(
                    "the table holds key {} for {:?}, which the mirror never recorded",
                    commit.n, commit.ids
                ));
            }
        }
        let mirrored_seq = mirrored.as_ref().map_or(0, |(_, image)| image.next_seq());
        let marks_lost = marks_lost(trace.images.get(last).and_then(Option::as_ref), mirrored.as_ref().map(|m| &m.1));
        let mirrored = mirrored.map(|(logical, _)| logical);

        // Recovery: the crash image (or an empty file, when it is lost), the same mirror objects, the same table;
        // then the job's rerun. An asynchronous mirror may lose acknowledged calls with the disk: the job reruns
        // from the first operation whose records the mirror lacks, as a job restarted from its last flush would.
        let lost = system.lose_local_file;
        let (resume, redone) = match &system.mirror {
            None if lost => return Err("a lost local file needs a mirror to restore from".into()),
            Some(m) if lost && m.mode != MirrorMode::Synchronous => {
                let from = redo_from(trace, last, mirrored_seq).min(resume);
                (from, (resume - from) as u64)
            }
            _ => (resume, 0),
        };
        let mut driver = driver.recover(if lost { CrashBackend::new() } else { image });
        driver.at_op(resume);
        driver.open().map_err(|e| format!("recovery open: {}", stopped(e)))?;
        let delivered_early = match system.stall {
            Stall::AfterSuccessorOpen => deliver_late_puts(rt, world),
            Stall::Off | Stall::AfterSuccessorEnd => Vec::new(),
        };
        let store = driver.store().ok_or("recovery open left no store")?;
        if system.mirror.is_some() {
            let expected = if lost { mirrored } else { local.as_ref().map(Image::logical).or(mirrored) };
            let got = Image::from_store(store)?.map(|i| i.logical());
            if expected.is_some() && got != expected {
                return Err(format!("the recovered store is\n  {got:#?}\n  the crash left {expected:#?}"));
            }
        } else {
            Image::check_store(local.as_ref(), store).map_err(|e| format!("recovered store: {e}"))?;
        }
        match driver.recover_call().map_err(|e| format!("recover: {}", stopped(e)))? {
            Err(e) if e.kind() != ErrorKind::Target => return Err(format!("recover after the crash: {e}")),
            _ => {}
        }
        let (outcomes, end) =
            play_from(&mut driver, &self.ops, resume, universe).map_err(|e| format!("finishing: {}", stopped(e)))?;
        for (i, got) in outcomes.iter().enumerate() {
            let index = resume + i;
            let want = &trace.outcomes[index];
            if !agrees(&self.ops[index], got, want) {
                return Err(format!("finishing op {index} {:?} gave {got:?}, the trace {want:?}", self.ops[index]));
            }
        }
        let want = &trace.end.as_ref().ok_or("the trace has no end")?.summary;
        if end.summary != *want {
            return Err(format!(
                "the job ended with\n  {:#?}\n  the crash-free run with {want:#?}{}",
                end.summary,
                late_note(&delivered_early)
            ));
        }
        driver.restore_check(&end).map_err(|e| format!("{e}{}", late_note(&delivered_early)))?;
        // The stall class counts the puts it delivers after the successor's end; the others, those a crash stopped.
        let late = if system.stall == Stall::AfterSuccessorEnd {
            let delivered = deliver_late_puts(rt, world);
            driver.restore_check(&end).map_err(|e| format!("{e}{}", late_note(&delivered)))?;
            delivered
        } else {
            delivered_early
        };
        Ok(CrashNotes { redone, marks_lost, ..CrashNotes::late(&late) })
    }

    /// With a mirror: what the mirror alone holds right after the crash must restore, be a state the local
    /// store passed through, and (in synchronous mode) hold every acknowledged call. Returns its state.
    fn mirror_at_crash(
        &self,
        rt: &Runtime,
        trace: &Trace,
        world: &World,
        last: usize,
    ) -> Result<Option<(Logical, Image)>, String> {
        let Some(settings) = &world.system.mirror else { return Ok(None) };
        let acked = trace.images.get(last).and_then(Option::as_ref);
        let store: Arc<dyn object_store::ObjectStore> = Arc::new(world.mirror_store(None));
        let view = match rt.block_on(MirrorView::open(store, World::prefix())) {
            Ok(view) => Image::from_database(view.database())?,
            Err(e) if e.kind() == ErrorKind::WrongStore => None,
            Err(e) => return Err(format!("the mirror alone does not restore: {e}")),
        };
        let Some(view) = view else {
            // Every open is acked only after its fence is in the mirror, in either mode.
            return match acked {
                None => Ok(None),
                Some(a) => Err(format!("the mirror holds no store, though seq {} was acked", a.next_seq())),
            };
        };
        let logical = view.logical();
        if trace.seq_states.get(&view.next_seq()) != Some(&logical) {
            return Err(format!(
                "the mirror holds a state the job never passed through at seq {}: {logical:#?}",
                view.next_seq()
            ));
        }
        // Every acknowledged record but the marks, which are never waited for: the records the mirror lacks must
        // be exactly the marks it lacks (one record a key, so a missing stage or intent would show as a surplus).
        if settings.mode == MirrorMode::Synchronous
            && let Some(a) = acked
            && view.next_seq() + marks_lost(Some(a), Some(&view)) < a.next_seq()
        {
            return Err(format!(
                "the mirror ends at seq {}, though seq {} was acked and only {} of the records between are lagging marks",
                view.next_seq(),
                a.next_seq(),
                marks_lost(Some(a), Some(&view))
            ));
        }
        Ok(Some((logical, view)))
    }
}

/// The first operation a job must redo after losing its disk over an asynchronous mirror that holds the records
/// up to `mirrored_seq`: the operation of the first call, up to the one in flight (`last`), whose acknowledged
/// state the mirror does not hold. A call's records ship in one group, so the mirror holds all of a call or
/// none of it. `usize::MAX` when the mirror holds every call made.
fn redo_from(trace: &Trace, last: usize, mirrored_seq: u64) -> usize {
    (0..=last)
        .find(|&c| trace.images.get(c + 1).and_then(Option::as_ref).map_or(0, Image::next_seq) > mirrored_seq)
        .map_or(usize::MAX, |c| trace.calls[c].op)
}

/// The commit keys `acked` holds committed and `mirrored` (the mirror alone, restored) still holds in flight.
fn marks_lost(acked: Option<&Image>, mirrored: Option<&Image>) -> u64 {
    let (Some(acked), Some(mirrored)) = (acked, mirrored) else { return 0 };
    let mirrored = mirrored.commit_records();
    acked
        .commit_records()
        .iter()
        .filter(|(_, c)| matches!(c.state, CheckpointState::Committed { .. }))
        .filter(|(n, _)| {
            mirrored.get(n).is_some_and(|m| {
                matches!(m.state, CheckpointState::Committing { .. } | CheckpointState::CommitUnknown { .. })
            })
        })
        .count() as u64
}
