//! The exhaustive crash-point runner.
//!
//! A [`Workload`] is a script of caller operations ([`Op`]). The runner plays it once on a [`CrashBackend`]
//! that never crashes (the *trace*), keeping the acknowledged state (the open store's committed tables) after
//! every store call and counting the I/O operations N. Then, for a crash point k in 1..=N, it plays the workload again on a backend that dies at
//! I/O operation k, drops the dead store (nothing more reaches the durable image), and checks:
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
//! Everything is played through the public [`crate::Store`] API in a current-thread tokio runtime.
//!
//! To extend it (a target, a mirror), add operations to [`Op`], play them in `driver.rs`, and add their
//! invariants to [`Image::check`] or to a check beside it; the runner itself does not change.

mod driver;
mod image;

use tokio::runtime::Runtime;

pub use image::{Image, Logical};

use crate::testkit::CrashBackend;
use crate::types::{CheckpointId, Part, SourceKey, WriteResult};
use driver::{CallRecord, Driver, Stop};

/// One caller operation of a workload. Attempts are not named: the driver stages into the checkpoint's current
/// attempt, as a caller that reads it with `get` does.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Op {
    /// `stage` one part of the current attempt.
    Stage {
        /// The checkpoint.
        id: CheckpointId,
        /// The part.
        part: Part,
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
}

/// What an operation returned, stable across runs: `Ok`, or the class of the error (the transition's variant
/// name, or the error kind).
pub type OpOutcome = Result<(), String>;

/// A named script of operations.
#[derive(Clone, Debug)]
pub struct Workload {
    /// A name for reports.
    pub name: String,
    /// The operations, in order.
    pub ops: Vec<Op>,
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
}

/// What an exhaustive run covered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Report {
    /// The crash points run and checked.
    pub crash_points: u64,
    /// The store calls of the crash-free run.
    pub calls: usize,
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
    /// A workload from a name and its operations.
    pub fn new(name: impl Into<String>, ops: Vec<Op>) -> Self {
        Self { name: name.into(), ops }
    }

    /// Plays the workload without a crash and keeps what every crash point is checked against.
    pub fn trace(&self, rt: &Runtime) -> Result<Trace, String> {
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
        Ok(Trace { calls: driver.calls, images, outcomes, final_logical, io_ops: backend.ops() })
    }

    /// Crashes the workload at I/O operation `k`, recovers, checks, and (with `finish`) finishes the workload and
    /// compares its end with the trace's. The error says what broke, at which call.
    pub fn crash_at(&self, rt: &Runtime, trace: &Trace, k: u64, finish: bool) -> Result<(), String> {
        self.crash_at_inner(rt, trace, k, finish).map_err(|e| format!("{} crash point {k}: {e}", self.name))
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
        for k in 1..=trace.io_ops {
            self.crash_at(&rt, &trace, k, true)?;
        }
        Ok(Report { crash_points: trace.io_ops, calls: trace.calls.len() })
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
}
