//! The driver: plays a workload's operations against a [`Store`] on a [`CrashBackend`] the way a sink writer
//! would, including the documented responses to what a crash leaves (restart and re-stage an orphan, skip a
//! commit key already begun with the same ids), and records every store call with its outcome. With a
//! [`System`](super::System) it also drives the committer against the target and opens the store through the
//! mirror, all as one simulated process.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::runtime::Runtime;

use super::system::{ProcessTarget, World};
use super::{Image, Op, OpOutcome};
use crate::commit::Committer;
use crate::error::{Error, ErrorKind, TransitionError};
use crate::store::{StageOutcome, Store};
use crate::testkit::{CrashBackend, ProcessCrash};
use crate::types::{CheckpointId, JobId, SourceKey, TargetIdentity, WriteResult};
use crate::{Attempt, Part, StagePart};

/// One store call and what it returned.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct CallRecord {
    /// The index of the operation the call belongs to.
    pub op: usize,
    /// What was called.
    pub what: String,
    /// Its outcome: `Ok` or the error's class.
    pub outcome: Result<(), String>,
}

/// Why the driver stopped before the end of the workload.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The backend died during the last recorded call (or right after it).
    Crashed,
    /// A check of the workload itself failed.
    Failed(String),
}

/// The class of an error, stable across runs: the transition's variant name, or the kind.
pub(crate) fn class(e: &Error) -> String {
    match e.transition() {
        Some(t) => {
            let debug = format!("{t:?}");
            debug.split([' ', '{', '(']).next().unwrap_or_default().to_owned()
        }
        None => format!("{:?}", e.kind()),
    }
}

/// The driver's memory of a checkpoint's current attempt: what the caller staged in it, by part, so that an
/// orphan can be restarted and re-staged as a retried task would.
pub(crate) type Memory = BTreeMap<CheckpointId, BTreeMap<u32, (Vec<SourceKey>, Vec<WriteResult>)>>;

pub(crate) struct Driver<'rt> {
    pub(crate) rt: &'rt Runtime,
    job: JobId,
    target: TargetIdentity,
    backend: CrashBackend,
    pub(crate) store: Option<Store>,
    pub(crate) memory: Memory,
    /// The target and the mirror, for a workload with a system.
    pub(crate) world: Option<Arc<World>>,
    /// The process the backend, the mirror and the target calls belong to.
    pub(crate) process: ProcessCrash,
    opens: u128,
    /// Every store call so far.
    pub calls: Vec<CallRecord>,
    /// The acknowledged state after each call (only when tracing): `after[i]` follows `calls[i]`.
    pub after: Option<Vec<Option<Image>>>,
    op: usize,
}

impl<'rt> Driver<'rt> {
    pub(crate) fn new(rt: &'rt Runtime, backend: CrashBackend, trace: bool) -> Result<Self, String> {
        Ok(Self {
            rt,
            job: JobId::new("crash-job").map_err(|e| e.to_string())?,
            target: TargetIdentity::new("mem://crash-table").map_err(|e| e.to_string())?,
            backend,
            store: None,
            memory: Memory::new(),
            world: None,
            process: ProcessCrash::new(),
            opens: 0,
            calls: Vec::new(),
            after: trace.then(Vec::new),
            op: 0,
        })
    }

    /// A driver for a workload with a system: `backend` is attached to `process`, and so are the mirror's and
    /// the target's calls.
    pub(crate) fn with_world(
        rt: &'rt Runtime,
        backend: CrashBackend,
        process: ProcessCrash,
        world: Arc<World>,
        trace: bool,
    ) -> Result<Self, String> {
        backend.attach(&process);
        Ok(Self { world: Some(world), process, ..Self::new(rt, backend, trace)? })
    }

    /// Carries the caller's memory over a crash onto a recovered backend, as a rerun of the same job would: a
    /// new process, which never crashes, on the same mirror objects and the same table.
    pub(crate) fn recover(mut self, backend: CrashBackend) -> Driver<'rt> {
        // The old store's backend is dead, so dropping it (a clean shutdown) cannot reach the durable image.
        drop(self.store.take());
        Driver { backend, store: None, calls: Vec::new(), after: None, process: ProcessCrash::new(), ..self }
    }

    /// The target as this driver's process sees it.
    pub(crate) fn target(&self) -> Result<ProcessTarget, Stop> {
        let world = self.world.as_ref().ok_or_else(|| Stop::Failed("a commit operation without a target".into()))?;
        Ok(ProcessTarget { inner: world.target.clone(), process: self.process.clone() })
    }

    pub(crate) fn backend(&self) -> &CrashBackend {
        &self.backend
    }

    pub(crate) fn job(&self) -> &JobId {
        &self.job
    }

    pub(crate) fn target_identity(&self) -> &TargetIdentity {
        &self.target
    }

    pub(crate) fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// Records one call's outcome; stops the workload if the backend died.
    pub(crate) fn record<T>(&mut self, what: String, result: &Result<T, Error>) -> Result<(), Stop> {
        let index = self.calls.len();
        let failure = |e: &Error| format!("call {index} {what} failed without a crash: {e}");
        let failure = result.as_ref().err().map(failure);
        self.calls.push(CallRecord { op: self.op, what, outcome: result.as_ref().map(drop).map_err(class) });
        if let Some(after) = &mut self.after {
            // The live state of the open store, which a crash must not lose; a closed store keeps the last.
            let image = match &self.store {
                Some(store) => {
                    let acked = Image::from_store(store).map_err(Stop::Failed)?;
                    // Durable before acknowledged: what the store answers from is what a crash now would leave.
                    let durable = Image::read(&self.backend).map_err(Stop::Failed)?;
                    if durable != acked {
                        return Err(Stop::Failed(format!(
                            "call {index} returned before its state was durable\n  acked {acked:#?}\n  durable {durable:#?}"
                        )));
                    }
                    acked
                }
                None => after.last().cloned().flatten(),
            };
            after.push(image);
        }
        if self.backend.is_dead() {
            return Err(Stop::Crashed);
        }
        match result {
            // Without a crash, only a refusal of the call itself is a legitimate outcome.
            Err(e) if matches!(e.kind(), ErrorKind::Poisoned | ErrorKind::Io | ErrorKind::Bug | ErrorKind::Corrupt) => {
                Err(Stop::Failed(failure.unwrap_or_default()))
            }
            _ => Ok(()),
        }
    }

    /// Opens the store (the first open and every reopen).
    pub(crate) fn open(&mut self) -> Result<(), Stop> {
        self.opens += 1;
        let mut builder =
            Store::builder(self.job.clone(), self.target.clone()).backend(self.backend.clone()).writer_tag(self.opens);
        if let Some(world) = &self.world
            && let Some(settings) = &world.system.mirror
        {
            let mirror = Arc::new(world.mirror_store(Some(&self.process)));
            builder = builder.mirror(mirror, World::prefix(), settings.clone()).clock(Arc::new(world.clock.clone()));
        }
        let (store, result) = match self.rt.block_on(builder.open()) {
            Ok(store) => (Some(store), Ok(())),
            Err(e) => (None, Err(e)),
        };
        self.store = store;
        self.record("open".into(), &result)
    }

    /// Runs the committer's recovery, as a job does right after it opened the store.
    pub(crate) fn recover_call(&mut self) -> Result<Result<(), Error>, Stop> {
        let target = self.target()?;
        let r = self.rt.block_on(Committer::new(self.live()?, &target).recover());
        self.record("recover".into(), &r)?;
        Ok(r.map(drop))
    }

    /// Sets the operation index the next calls are recorded under.
    pub(crate) fn at_op(&mut self, index: usize) {
        self.op = index;
    }

    /// Closes the store cleanly (never a stand-in for a crash: the backend decides what is durable).
    pub(crate) fn close(&mut self) -> Result<(), Stop> {
        if let Some(store) = self.store.take() {
            store.close();
        }
        self.record("close".into(), &Ok::<(), Error>(()))
    }

    pub(crate) fn live(&self) -> Result<&Store, Stop> {
        self.store.as_ref().ok_or_else(|| Stop::Failed("no open store".into()))
    }

    fn attempt(&self, id: &CheckpointId) -> Result<u32, Stop> {
        let store = self.live()?;
        match store.get(id) {
            Ok(info) => Ok(info.map_or(0, |i| i.attempt.get())),
            Err(_) if self.backend.is_dead() => Err(Stop::Crashed),
            Err(e) => Err(Stop::Failed(format!("get({id}): {e}"))),
        }
    }

    fn stage_once(
        &mut self,
        id: &CheckpointId,
        part: u32,
        keys: &[SourceKey],
        results: &[WriteResult],
    ) -> Result<Result<StageOutcome, Error>, Stop> {
        let attempt = self.attempt(id)?;
        let result = self.rt.block_on(self.live()?.stage(
            id,
            StagePart::new(Attempt::new(attempt), Part::new(part)).keys(keys.to_vec()).results(results.to_vec()),
        ));
        self.record(format!("stage({id}, {attempt}, {part})"), &result)?;
        Ok(result)
    }

    /// Stages one part; an orphan (staged by an older epoch) is restarted and its remembered parts re-staged
    /// first, the documented response.
    fn stage(
        &mut self,
        id: &CheckpointId,
        part: u32,
        keys: &[SourceKey],
        results: &[WriteResult],
    ) -> Result<OpOutcome, Stop> {
        let mut result = self.stage_once(id, part, keys, results)?;
        if result
            .as_ref()
            .err()
            .and_then(Error::transition)
            .is_some_and(|t| matches!(t, TransitionError::Orphaned { .. }))
        {
            let restarted = self.rt.block_on(self.live()?.restart(id));
            self.record(format!("restart({id}) of an orphan"), &restarted)?;
            if let Err(e) = restarted {
                return Ok(Err(class(&e)));
            }
            let remembered: Vec<_> = self.memory.get(id).into_iter().flatten().map(|(p, v)| (*p, v.clone())).collect();
            for (p, (k, r)) in remembered {
                if let Err(e) = self.stage_once(id, p, &k, &r)? {
                    return Ok(Err(class(&e)));
                }
            }
            result = self.stage_once(id, part, keys, results)?;
        }
        match result {
            Ok(_) => {
                self.memory.entry(id.clone()).or_default().insert(part, (keys.to_vec(), results.to_vec()));
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(class(&e))),
        }
    }

    /// Queues `seals` in a window while the writer is held, then flushes: the writer takes them and the flush's
    /// barrier in one batch (a thread lets it go once all are queued, or once the window gave up). Skips an
    /// input already processed, as a worker does (a rerun after a crash that left the seals durable).
    fn window_seals(&self, seals: &[(CheckpointId, Vec<SourceKey>, Vec<WriteResult>)]) -> Result<usize, Error> {
        let store = self.store.as_ref().ok_or_else(|| Error::bug("no open store"))?;
        let mut unprocessed = Vec::with_capacity(seals.len());
        for seal in seals {
            match seal.1.first() {
                Some(key) if store.is_processed(key)? => {}
                _ => unprocessed.push(seal),
            }
        }
        let seals = unprocessed;
        let window_size = (2 * seals.len() + 2).min(crate::limits::SEAL_WINDOW_SEALS_MAX);
        let settings = crate::store::SealWindowSettings { seals_in_flight_max: window_size };
        let calls = seals.len() as u64 + 1;
        let done = std::sync::atomic::AtomicBool::new(false);
        let hold = store.hold_writer();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while store.stats().queued() < calls && !done.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                drop(hold);
            });
            let landed = self.rt.block_on(async {
                let mut window = crate::store::SealWindow::new(store, settings)?;
                for (id, keys, results) in seals {
                    let part = StagePart::new(Attempt::FIRST, Part::FIRST).keys(keys.clone()).results(results.clone());
                    window.stage_and_seal(id, part, 1).await?;
                }
                window.flush().await.map(|landed| landed.len())
            });
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            landed
        })
    }

    /// Plays one operation; `Err` stops the workload.
    pub(crate) fn play(&mut self, index: usize, op: &Op) -> Result<OpOutcome, Stop> {
        self.op = index;
        let rt = self.rt;
        if self.world.is_some() && op.is_low_level_commit() {
            return Err(Stop::Failed(format!(
                "op {index} {op:?}: with a target, commits go through the committer (CommitPending, Recover)"
            )));
        }
        let outcome = match op {
            Op::Stage { id, part, keys, results } => return self.stage(id, *part, keys, results),
            Op::Seal { id, parts } => {
                let r = rt.block_on(self.live()?.seal(id, *parts));
                self.record(format!("seal({id}, {parts})"), &r)?;
                r.map(drop)
            }
            Op::Restart { id } => {
                let r = rt.block_on(self.live()?.restart(id));
                self.record(format!("restart({id})"), &r)?;
                if r.is_ok() {
                    self.memory.remove(id);
                }
                r.map(drop)
            }
            Op::Abort { id } => {
                let r = rt.block_on(self.live()?.abort(id));
                self.record(format!("abort({id})"), &r)?;
                if r.is_ok() {
                    self.memory.remove(id);
                }
                r.map(drop)
            }
            Op::BeginCommit { key, ids, final_commit } => {
                // A key already bound to the same ids was begun by an earlier run whose ack was lost.
                let mut sorted = ids.clone();
                sorted.sort();
                let existing = self.live()?.commit_info(*key);
                if existing.as_ref().is_ok_and(|c| c.as_ref().is_some_and(|c| c.ids == sorted)) {
                    return Ok(Ok(()));
                }
                let r = rt.block_on(self.live()?.protocol().begin_commit(*key, ids, Some(*key + 100), *final_commit));
                self.record(format!("begin_commit({key}, {ids:?})"), &r)?;
                r
            }
            Op::CommitEmpty { ids } => {
                let r = rt.block_on(self.live()?.protocol().commit_empty(ids));
                self.record(format!("commit_empty({ids:?})"), &r)?;
                r
            }
            Op::MarkCommitted { key } => {
                let r = rt.block_on(self.live()?.protocol().mark_committed(*key));
                self.record(format!("mark_committed({key})"), &r)?;
                r
            }
            Op::MarkUnknown { key } => {
                let r = rt.block_on(self.live()?.protocol().mark_unknown(*key, "timeout"));
                self.record(format!("mark_unknown({key})"), &r)?;
                r
            }
            Op::MarkNotCommitted { key } => {
                let r = rt.block_on(self.live()?.protocol().mark_not_committed(*key));
                self.record(format!("mark_not_committed({key})"), &r)?;
                r
            }
            Op::Reopen => {
                self.close()?;
                self.open()?;
                Ok(())
            }
            Op::CommitPending { final_commit } => {
                let target = self.target()?;
                let r = rt.block_on(Committer::new(self.live()?, &target).commit_or_finish(*final_commit));
                self.record(format!("commit_pending({final_commit})"), &r)?;
                r.map(drop)
            }
            Op::Recover => self.recover_call()?,
            Op::WindowSeals { seals } => {
                // What the caller stages, remembered before the window takes it: a crash may leave the seals
                // durable and the rerun's recovery commit them before the rerun reaches this operation again.
                for (id, keys, results) in seals {
                    self.memory.entry(id.clone()).or_default().insert(0, (keys.clone(), results.clone()));
                }
                let r = self.window_seals(seals);
                let ids: Vec<&str> = seals.iter().map(|(id, _, _)| id.as_str()).collect();
                self.record(format!("window_seals({ids:?})"), &r)?;
                r.map(drop)
            }
        };
        Ok(outcome.map_err(|e| class(&e)))
    }
}
