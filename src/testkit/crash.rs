//! The exhaustive crash-point runner.
//!
//! A [`Workload`] is a script of caller operations ([`Op`]). The runner plays it once on a [`CrashBackend`]
//! that never crashes (the *trace*), keeping the acknowledged state (the open store's committed tables) after
//! every store call and counting the I/O operations N. Then, for a crash point k in 1..=N, it plays the
//! workload again on a backend that dies at I/O operation k, drops the dead store (nothing more reaches the
//! durable image), and checks:
//!
//! 1. **durable before acknowledged, atomic**: the crash image, decoded, equals the trace's image after the
//!    last acked call, or after the call in flight when the backend died; nothing else (a rejected call wrote
//!    nothing, an in-flight call landed whole or not at all);
//! 2. the invariants of [`Image::check`] (one owner per key, pending results are the staged results of sealed
//!    checkpoints, commit records agree with their checkpoints, the log is dense and decodable);
//! 3. a store reopened on the crash image answers every read as the image says ([`Image::check_store`]);
//! 4. finishing the workload from the operation in flight — with the documented responses a caller gives to
//!    what a crash leaves: restart and re-stage an orphan, skip a commit key already bound to the same ids,
//!    and re-run every other call, which must succeed or be a no-op — gives every operation the outcome it had
//!    in the trace, and a final state equal to the trace's, up to epochs and attempt numbers.
//!
//! **The whole process.** A workload with a [`System`] also has a target (a `DirTable` behind a scripted
//! `FaultyTarget`) and optionally a mirror (a `FaultStore` over an in-memory bucket), driven through
//! [`Op::CommitPending`] and [`Op::Recover`] (the committer). The local file, the mirror's requests and the
//! target's calls belong to one [`ProcessCrash`](crate::testkit::ProcessCrash): N counts the points of all
//! three (a redb write, resize or sync; an object-store request, and the moment a put landed; a target call,
//! and the moment a commit returned), and at point k the whole process dies. Every acknowledged call of the
//! trace is checked to be durable when it returns. At each crash point:
//!
//! 1. the local crash image is exactly the trace's durable image after as many local operations, and passes
//!    [`Image::check`];
//! 2. the mirror alone restores (a read-only [`crate::mirror::MirrorView`]) to a state the local store passed
//!    through, holding, in synchronous mode, every acknowledged call;
//! 3. every key the table holds was recorded with its ids, locally and in the mirror, before it was called;
//! 4. recovery opens the crash image (or, with [`System::lose_local_file`], restores from the mirror alone)
//!    with the same mirror objects and table, reaching the crash's state (the mirror's, when the file is lost);
//!    runs `Committer::recover`, finishes the workload (over an asynchronous mirror with the file lost, from the
//!    first operation whose records the mirror lacked, as a job restarted from its last flush redoes it) (each operation's outcome as in the trace, where an unknown commit outcome may move between
//!    commit calls) and the job (`finish()` until nothing is pending);
//! 5. at the end: no checkpoint is left Sealed, Committing or CommitUnknown; the table holds one commit per
//!    recorded key, each with exactly its checkpoints' staged write results, none twice; every committed
//!    checkpoint is what the caller staged; the skip set is exactly the committed checkpoints' keys; the end
//!    equals the trace's up to commit key numbers; and a store restored from the mirror alone has the same
//!    state and finds nothing to do.
//!
//! With an asynchronous mirror or snapshots, the mirror's requests interleave with the local file's
//! differently from run to run, so a point k is not always the same operation (every k still crashes one);
//! with snapshots, check 1 is skipped, since they move the local log's truncation.
//!
//! Everything is played through the public [`crate::Store`] API in a current-thread tokio runtime.
//!
//! To extend it, add operations to [`Op`], play them in `driver.rs`, and add their invariants to
//! [`Image::check`], or to the end checks (`end.rs`) for a whole process.

mod driver;
mod end;
mod image;
mod stale;
mod system;
mod system_run;

use tokio::runtime::Runtime;

pub use image::{Image, Logical};
pub use stale::StaleReport;
pub use system::{SNAPSHOTS_OFF, Stall, System};

use crate::testkit::CrashBackend;
use crate::types::{CheckpointId, SourceKey, WriteResult};
use driver::{CallRecord, Driver, Stop};
pub use system_run::CrashNotes;

/// One caller operation of a workload. Attempts are not named: the driver stages into the checkpoint's current
/// attempt, as a caller that reads it with `get` does.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Op {
    /// `stage` one part of the current attempt.
    Stage {
        /// The checkpoint.
        id: CheckpointId,
        /// The part.
        part: u32,
        /// Its source keys.
        keys: Vec<SourceKey>,
        /// Its write results.
        results: Vec<WriteResult>,
    },
    /// `seal` with a part count.
    Seal {
        /// The checkpoint.
        id: CheckpointId,
        /// The part count.
        parts: u32,
    },
    /// `restart`: begin the next attempt.
    Restart {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// `abort` a staged checkpoint.
    Abort {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// `begin_commit` of a key over some ids.
    BeginCommit {
        /// The key's number.
        key: u64,
        /// The checkpoints it covers.
        ids: Vec<CheckpointId>,
        /// Whether it is the job's last commit.
        final_commit: bool,
    },
    /// `commit_empty` of checkpoints without results.
    CommitEmpty {
        /// The checkpoints.
        ids: Vec<CheckpointId>,
    },
    /// `mark_committed`.
    MarkCommitted {
        /// The key's number.
        key: u64,
    },
    /// `mark_unknown`.
    MarkUnknown {
        /// The key's number.
        key: u64,
    },
    /// `mark_not_committed`.
    MarkNotCommitted {
        /// The key's number.
        key: u64,
    },
    /// Close the store cleanly and open it again: a new epoch, so staged checkpoints become orphans.
    Reopen,
    /// `Committer::commit_pending`: resolve the key in flight, then commit every sealed checkpoint under the
    /// next keys (a workload with a [`System`] only).
    CommitPending {
        /// Whether the last key is the job's final commit.
        final_commit: bool,
    },
    /// `Committer::recover`, as a job does right after it opened the store (a workload with a [`System`] only).
    Recover,
    /// A worker's window: `stage_and_seal` of one-part checkpoints queued in a `SealWindow` (none of them
    /// fsynced: fewer than half the window), then `flush`, all while the writer is held, so that the unsynced
    /// seals and the flush's barrier share one batch. Acknowledged when `flush` reports them landed.
    WindowSeals {
        /// Each checkpoint with its source keys and write results.
        seals: Vec<(CheckpointId, Vec<SourceKey>, Vec<WriteResult>)>,
    },
}

impl Op {
    /// Whether the operation drives the commit protocol's records directly, which a workload with a target
    /// leaves to the committer.
    pub fn is_low_level_commit(&self) -> bool {
        matches!(
            self,
            Op::BeginCommit { .. }
                | Op::CommitEmpty { .. }
                | Op::MarkCommitted { .. }
                | Op::MarkUnknown { .. }
                | Op::MarkNotCommitted { .. }
        )
    }
}

/// What an operation returned, stable across runs: `Ok`, or the class of the error (the transition's variant
/// name, or the error kind).
pub type OpOutcome = Result<(), String>;

/// A named script of operations, played against the local file alone or against a [`System`].
#[derive(Clone, Debug)]
pub struct Workload {
    /// A name for reports.
    pub name: String,
    /// The operations, in order.
    pub ops: Vec<Op>,
    /// The target and mirror it runs against; `None` for the local file alone.
    pub system: Option<System>,
}

/// The crash-free run of a workload: the reference every crash point is checked against.
#[derive(Debug)]
pub struct Trace {
    calls: Vec<CallRecord>,
    /// `images[i]` is the acknowledged state after the first i calls (`images[0]` before anything).
    images: Vec<Option<Image>>,
    outcomes: Vec<OpOutcome>,
    final_logical: Option<Logical>,
    io_ops: u64,
    /// With a system: every durable local image, with the count of local operations up to its sync.
    syncs: Vec<(u64, Option<Image>)>,
    /// With a system: the logical state at every sequence number the local store passed through.
    seq_states: std::collections::BTreeMap<u64, Logical>,
    /// With a system: what the finished job left.
    end: Option<end::End>,
    /// With a system: the points per component (local, mirror, target).
    per_component: [u64; 3],
    /// With a mirror: the mirror's history and the table the job left, for the stale-mirror class.
    history: Option<stale::History>,
}

impl Trace {
    /// The I/O operations of the whole workload: its crash points are 1..=`io_ops`.
    pub fn io_ops(&self) -> u64 {
        self.io_ops
    }

    /// Each operation's outcome in the crash-free run.
    pub fn outcomes(&self) -> &[OpOutcome] {
        &self.outcomes
    }

    /// The store calls made, in order.
    pub fn calls(&self) -> usize {
        self.calls.len()
    }

    /// With a system, the crash points of the local file, the mirror and the target, in that order.
    pub fn points_per_component(&self) -> [u64; 3] {
        self.per_component
    }
}

/// What an exhaustive run covered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Report {
    /// The crash points run and checked.
    pub crash_points: u64,
    /// The store calls of the crash-free run.
    pub calls: usize,
    /// The crash points of the local file, the mirror and the target, in that order.
    pub per_component: [u64; 3],
    /// With a [`Stall`]: the dead processes' puts delivered late, over every crash point.
    pub late_delivered: u64,
    /// Of those, how many landed (the others were refused by their conditions).
    pub late_landed: u64,
    /// Over an asynchronous mirror with the disk lost: operations the reruns redid, over every crash point.
    pub ops_redone: u64,
    /// Likewise: acknowledged marks the restored mirror lacked, which recovery found in the table.
    pub marks_lost: u64,
}

/// A current-thread runtime for the runner (the store's writer is its own thread).
pub fn runtime() -> Result<Runtime, String> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| format!("tokio runtime: {e}"))
}

fn stopped(stop: Stop) -> String {
    match stop {
        Stop::Crashed => "the backend died without a crash point".into(),
        Stop::Failed(message) => message,
    }
}

/// Plays `ops[start..]` after an open, then closes; returns each operation's outcome.
fn play(driver: &mut Driver<'_>, ops: &[Op], start: usize) -> Result<Vec<OpOutcome>, Stop> {
    driver.at_op(start);
    driver.open()?;
    let mut outcomes = Vec::new();
    for (i, op) in ops.iter().enumerate().skip(start) {
        outcomes.push(driver.play(i, op)?);
    }
    driver.at_op(ops.len());
    driver.close()?;
    Ok(outcomes)
}

impl Workload {
    /// A workload from a name and its operations, on the local file alone.
    pub fn new(name: impl Into<String>, ops: Vec<Op>) -> Self {
        Self { name: name.into(), ops, system: None }
    }

    /// The same workload against `system`.
    pub fn with_system(mut self, system: System) -> Self {
        self.system = Some(system);
        self
    }

    /// Plays the workload without a crash and keeps what every crash point is checked against.
    pub fn trace(&self, rt: &Runtime) -> Result<Trace, String> {
        if let Some(system) = &self.system {
            return self.trace_system(rt, system).map_err(|e| format!("{}: {e}", self.name));
        }
        let backend = CrashBackend::new();
        let mut driver = Driver::new(rt, backend.clone(), true)?;
        let outcomes = play(&mut driver, &self.ops, 0).map_err(stopped)?;
        let mut images = vec![None];
        for (i, image) in driver.after.take().unwrap_or_default().into_iter().enumerate() {
            if let Some(image) = &image {
                image.check().map_err(|e| format!("{}: after call {i} ({}): {e}", self.name, driver.calls[i].what))?;
            }
            images.push(image);
        }
        let final_logical = Image::read(&backend)?.map(|i| i.logical());
        Ok(Trace {
            calls: driver.calls,
            images,
            outcomes,
            final_logical,
            io_ops: backend.ops(),
            syncs: Vec::new(),
            seq_states: std::collections::BTreeMap::new(),
            end: None,
            per_component: [backend.ops(), 0, 0],
            history: None,
        })
    }

    /// Crashes the workload at I/O operation `k`, recovers, checks, and (with `finish`) finishes the workload and
    /// compares its end with the trace's. The error says what broke, at which call.
    /// Returns what the recovery met beyond passing: late puts (with a [`Stall`]), operations redone and marks
    /// lost (an asynchronous mirror with the disk lost).
    pub fn crash_at(&self, rt: &Runtime, trace: &Trace, k: u64, finish: bool) -> Result<CrashNotes, String> {
        let result = match &self.system {
            Some(system) => self.crash_system(rt, trace, k, system),
            None => self.crash_at_inner(rt, trace, k, finish).map(|()| CrashNotes::default()),
        };
        result.map_err(|e| format!("{} crash point {k}: {e}", self.name))
    }

    fn crash_at_inner(&self, rt: &Runtime, trace: &Trace, k: u64, finish: bool) -> Result<(), String> {
        let backend = CrashBackend::new();
        backend.crash_at(Some(k));
        let mut driver = Driver::new(rt, backend.clone(), false)?;
        match play(&mut driver, &self.ops, 0) {
            Ok(outcomes) => {
                // The crash point lies past the workload's last I/O operation.
                return if outcomes == trace.outcomes { Ok(()) } else { Err("outcomes differ from the trace".into()) };
            }
            Err(Stop::Failed(message)) => return Err(message),
            Err(Stop::Crashed) => {}
        }
        let calls = &driver.calls;
        let last = calls.len() - 1;
        for (i, call) in calls.iter().enumerate() {
            let reference = trace.calls.get(i).ok_or("more calls than the trace")?;
            if call.what != reference.what || (i < last && call.outcome != reference.outcome) {
                return Err(format!("call {i}: {call:?} where the trace has {reference:?} (non-deterministic)"));
            }
        }
        // The last call was acked if it returned what the trace returned before the backend died.
        let acked = calls[last].outcome == trace.calls[last].outcome && calls[last].outcome.is_ok();
        let allowed: &[Option<Image>] =
            if acked { &trace.images[last + 1..=last + 1] } else { &trace.images[last..=last + 1] };
        let resume = calls[last].op;
        let in_flight = format!("call {last} {} ({})", calls[last].what, if acked { "acked" } else { "in flight" });

        let image = backend.crash_image();
        let recovered = Image::read(&image)?;
        if !allowed.contains(&recovered) {
            return Err(format!(
                "after {in_flight}: the crash image is none of the trace's images\n  got {recovered:#?}\n  allowed {allowed:#?}"
            ));
        }
        if let Some(r) = &recovered {
            r.check().map_err(|e| format!("after {in_flight}: crash image: {e}"))?;
        }
        let mut driver = driver.recover(image);
        driver.at_op(resume);
        driver.open().map_err(|e| format!("after {in_flight}: recovery open: {}", stopped(e)))?;
        let store = driver.store().ok_or("recovery open left no store")?;
        Image::check_store(recovered.as_ref(), store)
            .map_err(|e| format!("after {in_flight}: recovered store: {e}"))?;
        if let Some(opened) = Image::read(driver.backend())? {
            opened.check().map_err(|e| format!("after {in_flight}: reopened image: {e}"))?;
        }
        if !finish {
            return Ok(());
        }
        let mut outcomes = Vec::new();
        for (i, op) in self.ops.iter().enumerate().skip(resume) {
            let outcome =
                driver.play(i, op).map_err(|e| format!("after {in_flight}: finishing op {i}: {}", stopped(e)))?;
            if outcome != trace.outcomes[i] {
                return Err(format!(
                    "after {in_flight}: finishing op {i} {op:?} gave {outcome:?}, the trace {:?}",
                    trace.outcomes[i]
                ));
            }
            outcomes.push(outcome);
        }
        driver.at_op(self.ops.len());
        driver.close().map_err(stopped)?;
        let end = Image::read(driver.backend())?;
        if let Some(end) = &end {
            end.check().map_err(|e| format!("after {in_flight}: finished image: {e}"))?;
        }
        let end = end.map(|i| i.logical());
        if end != trace.final_logical {
            return Err(format!(
                "after {in_flight}: the finished state differs from the crash-free one\n  got {end:#?}\n  want {:#?}",
                trace.final_logical
            ));
        }
        Ok(())
    }

    /// Runs every crash point of the workload (1..=N, N counted by a crash-free run) and checks each.
    pub fn run_exhaustive(&self) -> Result<Report, String> {
        let rt = runtime()?;
        let trace = self.trace(&rt)?;
        let (mut late_delivered, mut late_landed, mut ops_redone, mut marks_lost) = (0, 0, 0, 0);
        for k in 1..=trace.io_ops {
            let notes = self.crash_at(&rt, &trace, k, true)?;
            late_delivered += notes.delivered;
            late_landed += notes.landed;
            ops_redone += notes.redone;
            marks_lost += notes.marks_lost;
        }
        Ok(Report {
            crash_points: trace.io_ops,
            calls: trace.calls.len(),
            per_component: trace.per_component,
            late_delivered,
            late_landed,
            ops_redone,
            marks_lost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Format;

    fn workload() -> Workload {
        let id = CheckpointId::new("a").unwrap();
        let result = WriteResult::new(Format::Lance, b"f".to_vec()).unwrap();
        Workload::new(
            "t",
            vec![
                Op::Stage { id: id.clone(), part: 0, keys: vec![b"k".to_vec()], results: vec![result] },
                Op::Seal { id, parts: 1 },
            ],
        )
    }

    /// The runner is only evidence if it can fail: against a wrong reference, crash points must fail.
    #[test]
    fn a_wrong_reference_fails_the_crash_points() {
        let rt = runtime().unwrap();
        let w = workload();
        let trace = w.trace(&rt).unwrap();
        assert!((1..=trace.io_ops).all(|k| w.crash_at(&rt, &trace, k, true).is_ok()));

        // As if no call had ever been acknowledged: any crash image holding the store must be refused.
        let mut forgetful = w.trace(&rt).unwrap();
        forgetful.images.iter_mut().for_each(|i| *i = None);
        let failed = (1..=trace.io_ops).filter(|k| w.crash_at(&rt, &forgetful, *k, false).is_err()).count();
        assert!(failed as u64 > trace.io_ops / 2, "{failed} of {} failed", trace.io_ops);

        // As if the seal had been refused: finishing must disagree wherever the seal is re-run.
        let mut refused = w.trace(&rt).unwrap();
        refused.outcomes[1] = Err("MissingParts".into());
        let failed = (1..=trace.io_ops).filter(|k| w.crash_at(&rt, &refused, *k, true).is_err()).count();
        assert!(failed > 0);
        // And a different end state fails every crash point that finishes.
        let mut other_end = w.trace(&rt).unwrap();
        other_end.final_logical = None;
        assert!((1..=trace.io_ops).all(|k| w.crash_at(&rt, &other_end, k, true).is_err()));
    }

    fn system_workload() -> Workload {
        let id = CheckpointId::new("a").unwrap();
        let result = WriteResult::new(Format::Lance, b"f".to_vec()).unwrap();
        let ops = vec![
            Op::Recover,
            Op::Stage { id: id.clone(), part: 0, keys: vec![b"k".to_vec()], results: vec![result] },
            Op::Seal { id, parts: 1 },
            Op::CommitPending { final_commit: true },
        ];
        let system = System::mirrored(crate::mirror::MirrorMode::Synchronous, SNAPSHOTS_OFF);
        Workload::new("s", ops).with_system(system)
    }

    /// The same for the whole-process runner: a wrong end, wrong durable images or wrong mirror states fail.
    #[test]
    fn a_wrong_reference_fails_the_whole_process_crash_points() {
        let rt = runtime().unwrap();
        let w = system_workload();
        let trace = w.trace(&rt).unwrap();
        let [local, mirror, target] = trace.per_component;
        assert!(local > 0 && mirror > 0 && target > 0, "{:?}", trace.per_component);
        assert!((1..=trace.io_ops).all(|k| w.crash_at(&rt, &trace, k, true).is_ok()));
        let failures = |trace: &Trace| (1..=trace.io_ops).filter(|k| w.crash_at(&rt, trace, *k, true).is_err()).count();

        // As if the job had ended with another file in the table: every crash point fails.
        let mut other_end = w.trace(&rt).unwrap();
        if let Some(end) = other_end.end.as_mut() {
            end.summary.files.push("f".into());
        }
        assert_eq!(failures(&other_end), trace.io_ops as usize);
        // As if nothing had ever been durable locally: every crash point after the first sync fails.
        let mut forgetful = w.trace(&rt).unwrap();
        forgetful.syncs.iter_mut().for_each(|(_, image)| *image = None);
        assert!(failures(&forgetful) as u64 > trace.io_ops / 2);
        // As if the mirror's states were none the store passed through.
        let mut no_states = w.trace(&rt).unwrap();
        no_states.seq_states.clear();
        assert!(failures(&no_states) as u64 > trace.io_ops / 2);
        // As if every call had been acked at the end's sequence number: the mirror lags it almost everywhere.
        let mut eager = w.trace(&rt).unwrap();
        let last = eager.images.last().cloned().flatten();
        eager.images.iter_mut().for_each(|i| *i = last.clone());
        assert!(failures(&eager) as u64 > trace.io_ops / 2);
    }

    /// The stall class only proves something if a late put that breaks the mirror is caught: delivered without
    /// its conditions (by a store that ignores `If-None-Match`), the dead process's late puts overwrite what the
    /// successor wrote, and the runner must fail; with them, every point passes and some late puts landed.
    #[test]
    fn the_stall_class_catches_late_puts_that_overwrite_the_successor() {
        let rt = runtime().unwrap();
        let mut w = system_workload();
        let system = w.system.take().unwrap().stalling(Stall::AfterSuccessorEnd);
        w = w.with_system(system.clone());
        let report = w.run_exhaustive().unwrap();
        assert!(report.late_delivered > 0, "{report:?}");

        let mut unconditional = system;
        unconditional.late_puts_unconditional = true;
        let w = w.with_system(unconditional);
        let trace = w.trace(&rt).unwrap();
        let failed: Vec<String> = (1..=trace.io_ops).filter_map(|k| w.crash_at(&rt, &trace, k, true).err()).collect();
        assert!(!failed.is_empty(), "no crash point failed with unconditional late puts");
        println!("{} crash points failed, e.g.: {}", failed.len(), failed[0]);
    }
}
